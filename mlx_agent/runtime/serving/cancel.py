"""Stopping the generation of a client that has gone, and noticing a generation thread that has died.

mlx_lm's handler blocks on its reply queue until the reply is complete, and only finds out the client left
when it writes (a non-streaming reply runs to ``max_tokens`` for nobody). ``ReplyStream`` waits for tokens
with a short timeout instead and looks at the client's socket every ``POLL_SECONDS``: once the client has
closed it, the generation context is stopped (mlx_lm drops the reply at its next step, other replies in the
batch go on) and the log says how many tokens the reply had and whether generation really stopped.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from queue import Empty, Queue
from typing import Any

from mlx_agent.errors import ClientGone
from mlx_agent.runtime.serving.errors_http import from_generation_error, generation_unavailable

log = logging.getLogger(__name__)

POLL_SECONDS = 0.1
# After stopping, a reply is "stopped" once no token came for this long (mlx_lm sends nothing more).
QUIET_SECONDS = 0.5
DRAIN_SECONDS = 5.0


def client_gone(connection: socket.socket | None) -> bool:
    """Return whether the peer closed ``connection``: it is readable and a peek reads nothing (or fails).

    A client sends nothing after its request, so a readable socket means end of file or an error.
    """
    if connection is None:
        return False
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except (OSError, ValueError):
        return True


@dataclass
class ReplyStream:
    """The tokens of one reply, read from its queue while the client and the generation thread are watched."""

    ctx: Any  # mlx_lm.server.GenerationContext
    queue: Queue[Any]
    connection: socket.socket | None
    alive: Callable[[], bool]
    label: str
    progress: Callable[[int, int], None] | None = None
    cut: Callable[[], str | None] = lambda: None
    tokens: int = 0
    stopped: bool = field(default=False, init=False)

    def __iter__(self) -> Iterator[Any]:
        """Yield mlx_lm's ``Response`` objects; raise ``ClientGone`` or an ``HttpError`` when it must end."""
        looked = time.monotonic()
        while True:
            try:
                item = self.queue.get(timeout=POLL_SECONDS)
            except Empty:
                item = _NOTHING
            now = time.monotonic()
            if now - looked >= POLL_SECONDS or item is _NOTHING:
                looked = now
                if client_gone(self.connection):
                    self.abandon("the client went away")
                    raise ClientGone
                if item is _NOTHING and not self.alive():
                    raise generation_unavailable()
            if item is _NOTHING:
                continue
            if item is None:
                return
            if isinstance(item, Exception):
                raise from_generation_error(item)
            if isinstance(item, tuple):
                if self.progress is not None:
                    self.progress(*item)
                continue
            self.tokens += 1
            if item.finish_reason is not None and self.cut():
                item = replace(item, finish_reason="length")
            yield item

    def abandon(self, why: str) -> None:
        """Stop the reply's generation and log whether it stopped (once).

        mlx_lm drops a stopped reply after its current time slice (at most half a second of steps), so a few
        tokens still come; those already queued when we stopped were generated before the stop.
        """
        if self.stopped:
            return
        self.stopped = True
        queued = self.queue.qsize()
        self.ctx.stop()
        drained, quiet = self._drain()
        state = "generation stopped" if quiet else f"generation did not stop within {DRAIN_SECONDS:.0f} s"
        log.info(
            "mlx-agent: %s from %s after %d tokens; %s (%d more tokens after the stop)",
            why,
            self.label,
            self.tokens + queued,
            state,
            max(0, drained - queued),
        )

    def _drain(self) -> tuple[int, bool]:
        """Read what the generation thread still sends; return (tokens, whether it went quiet)."""
        late = 0
        deadline = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < deadline:
            try:
                item = self.queue.get(timeout=QUIET_SECONDS)
            except Empty:
                return late, True
            if item is None or isinstance(item, Exception):
                return late, True
            if not isinstance(item, tuple):
                late += 1
        return late, False


_NOTHING = object()
