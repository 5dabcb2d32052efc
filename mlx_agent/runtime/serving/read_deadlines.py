"""A request handler that reads each request off a worker's socket under ``socket_limits``' deadlines.

One mixin for every handler of a wrapped worker (mlx_lm's ``WrappedHandler``, the embedding worker's): the
request line and headers must arrive within ``header_timeout`` of the request's start and the body within
``body_timeout`` of its headers, however slowly they trickle (``DeadlineReader``); ``http.server`` closes a
connection whose headers time out, and the handler answers a late body 408. ``refuse_unread`` answers a
refusal to a client that is still sending (a body over the cap) and drains the rest briefly, since closing
with unread data would reset the connection and could destroy the answer before it is read.

Stdlib, ``native_entry`` and ``socket_limits`` only: no mlx.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from mlx_agent.runtime.entries.native_entry import DeadlineReader
from mlx_agent.runtime.serving import socket_limits


class ReadDeadlines(BaseHTTPRequestHandler):
    """Mixin: every request is read under the worker's ``socket_limits.current()`` deadlines."""

    reader: DeadlineReader | None = None

    def setup(self) -> None:
        """Read the connection through a reader that keeps the request's deadlines."""
        super().setup()
        self.rfile.close()  # the stdlib's own reader, unused: it would hold the socket open
        self.reader = DeadlineReader(self.connection, None)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        """Read one request whose line and headers must arrive within the header deadline."""
        if self.reader is not None:
            self.reader.start(socket_limits.current().header_timeout)
        super().handle_one_request()

    def parse_request(self) -> bool:
        """Parse the headers; the body, if any, must then arrive within the body deadline."""
        parsed: bool = super().parse_request()
        if parsed and self.reader is not None:
            self.reader.start(socket_limits.current().body_timeout)
        return parsed

    def refuse_unread(self, answer: Callable[[], None]) -> None:
        """Write ``answer`` to a client that may have stopped reading, then drain what it still sends, briefly."""
        self.close_connection = True
        if self.reader is not None:
            self.reader.lift(socket_limits.REFUSAL_WRITE_S)
        try:
            answer()
            if self.reader is not None:
                self.reader.start(socket_limits.REFUSAL_WRITE_S)
                while self.rfile.read1(1 << 16):
                    pass
        except OSError:  # the client is gone, or too slow even to take its answer (a timeout)
            pass
