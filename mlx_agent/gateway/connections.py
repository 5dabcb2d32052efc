"""Bounds on the front's connections that aiohttp does not set: how many at once, how long headers may take.

``GuardedConnections`` wraps aiohttp's protocol factory. Past ``max_connections`` open connections a new one
is closed at once (the client sees a reset and may retry; the ones already open are served). A connection
whose first request's headers have not all arrived ``header_timeout`` seconds after it opened is closed (a
client sending a byte at a time holds nothing for long). Idle keep-alive connections are aiohttp's
``keepalive_timeout``, set from the same plan limits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("mlx_agent.gateway")
HEADERS_END = b"\r\n\r\n"


class GuardedProtocol(asyncio.Protocol):
    """One connection: aiohttp's protocol behind a count and a header deadline."""

    def __init__(self, owner: GuardedConnections) -> None:
        self.owner = owner
        self.inner: Any = None  # aiohttp's protocol, made once the connection is accepted
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses
        self.tail = b""  # the last bytes seen, so a header end split across reads is found
        self.deadline: asyncio.TimerHandle | None = None
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Count the connection, or close it at once past the limit; start the header deadline."""
        self.transport = transport
        if self.owner.open >= self.owner.max_connections:
            self.owner.refused += 1
            if self.owner.refused in (1, 10, 100) or self.owner.refused % 1000 == 0:
                log.warning("%d connection(s) refused: %d are open already", self.owner.refused, self.owner.open)
            self.transport.abort()
            return
        self.owner.open += 1
        self.counted = True
        self.deadline = asyncio.get_running_loop().call_later(self.owner.header_timeout, self._too_slow)
        self.inner = self.owner.factory()
        self.inner.connection_made(self.transport)

    def _too_slow(self) -> None:
        self.deadline = None
        if self.transport is not None and not self.transport.is_closing():
            log.info("closed a connection whose request headers took over %g s", self.owner.header_timeout)
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        """Pass bytes on; the deadline ends once the first request's headers are complete."""
        if self.deadline is not None:
            window = self.tail + data
            if HEADERS_END in window:
                self.deadline.cancel()
                self.deadline = None
            self.tail = window[-(len(HEADERS_END) - 1) :]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        """Pass the end of the client's data on."""
        result: bool | None = self.inner.eof_received()
        return result

    def pause_writing(self) -> None:
        """Pass flow control on."""
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        """Pass flow control on."""
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        """Uncount the connection and tell aiohttp."""
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        if not self.counted:
            return
        self.owner.open -= 1
        self.counted = False
        self.inner.connection_lost(exc)


class GuardedConnections:
    """A protocol factory for ``loop.create_server`` that applies the connection limits to aiohttp's."""

    def __init__(self, factory: Callable[[], Any], max_connections: int, header_timeout: float) -> None:
        self.factory = factory
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.open = 0
        self.refused = 0

    def __call__(self) -> GuardedProtocol:
        """Return the protocol of a new connection."""
        return GuardedProtocol(self)
