"""Bounds on the front's connections that aiohttp does not set: how many at once, how long headers and bodies take.

``GuardedConnections`` wraps aiohttp's protocol factory, and ``track_requests`` (the outermost middleware) tells
each connection when a request begins and ends, so a connection is always in one of three states:

* waiting: its headers have not all arrived, or it is idle between requests, or its body is still arriving;
* busy: its request is whole (headers and body) and being answered, a stream included;
* closing: evicted or cut off, gone from the count at once.

Limits, all from the plan (``front.*``):

* ``max_connections``: a new connection past the limit closes the waiting connection that has waited longest
  (idle, headers or body alike), so a slow client cannot hold a slot against a newcomer; only when every open
  connection is busy is the newcomer closed at once (the client sees a reset and may retry).
* ``header_timeout``: a connection whose first request's headers have not all arrived this many seconds after
  it opened is closed (a client sending a byte at a time holds nothing for long). Idle keep-alive connections
  are aiohttp's ``keepalive_timeout``, set from the same plan.
* ``body_timeout``, ``body_min_rate``, ``body_grace``: a body still arriving ``body_timeout`` seconds after its
  headers, or averaging under ``body_min_rate`` bytes/s once ``body_grace`` seconds have passed, is cut off:
  its reader gets ``BodyTimeout`` (the guard answers 408 ``body_timeout``) and the connection closes.
* A request answered without its whole body being read (a 401, 403 or 413 from the headers alone) closes its
  connection after the answer: the rest of the body is never read (aiohttp would read it for 10 s more).

``ConnectionCollector`` puts the counts on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from mlx_agent.records.front import FrontConfig

# What every middleware and route of the front is (the door's lowest module holds it: all of them import it).
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger("mlx_agent.gateway")
HEADERS_END = b"\r\n\r\n"
MIN_CHECK_S = 0.05  # the shortest wait between two checks of a body's rate (float rounding never spins)
CLOSE_AFTER_S = 1.0  # a cut-off body's connection is closed this long after its 408, if the answer has not
CLOSE_REASONS = ("limit", "evicted", "header_timeout", "body_timeout")


class BodyTimeout(Exception):
    """A request body that came too slowly: raised into its reader, answered 408 ``body_timeout``."""


@dataclass(frozen=True)
class Limits:
    """The plan's connection limits (``front.*``)."""

    max_connections: int
    header_timeout: float
    body_timeout: float
    body_min_rate: float  # bytes/s; 0 checks the total deadline only
    body_grace: float

    @classmethod
    def of(cls, config: FrontConfig) -> Limits:
        """Return the limits a front config gives."""
        return cls(
            config["max_connections"],
            config["header_timeout"],
            config["body_timeout"],
            config["body_min_rate"],
            config["body_grace"],
        )


class GuardedProtocol(asyncio.Protocol):
    """One connection: aiohttp's protocol behind the count, the header deadline and the body deadline."""

    def __init__(self, owner: GuardedConnections) -> None:
        self.owner = owner
        self.inner: Any = None  # aiohttp's protocol, made once the connection is accepted
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport subclasses
        self.tail = b""  # the last bytes seen, so a header end split across reads is found
        self.deadline: asyncio.TimerHandle | None = None
        self.request: web.BaseRequest | None = None  # the request being handled, between track's begin and end
        self.waiting_since = 0.0  # loop time the current wait (headers, idle, body) began
        self.body_started = 0.0
        self.body_timer: asyncio.TimerHandle | None = None
        self.close_timer: asyncio.TimerHandle | None = None

    @property
    def busy(self) -> bool:
        """Whether the connection's request is whole and being answered (never evicted)."""
        return self.request is not None and self.request.content.is_eof()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Count the connection (making room past the limit, or closing it at once); start the header deadline."""
        self.transport = transport
        owner = self.owner
        if len(owner.conns) >= owner.limits.max_connections and not owner.make_room():
            owner.count("limit", "%d connection(s) refused: %d are open, none waiting", len(owner.conns))
            self.transport.abort()
            return
        loop = asyncio.get_running_loop()
        self.waiting_since = loop.time()
        owner.conns[self] = None
        self.deadline = loop.call_later(owner.limits.header_timeout, self._headers_too_slow)
        self.inner = owner.factory()
        self.inner.connection_made(self.transport)

    def _headers_too_slow(self) -> None:
        self.deadline = None
        if self.transport is not None and not self.transport.is_closing():
            self.owner.count(
                "header_timeout", "%d connection(s) closed: headers took over %g s", self.owner.limits.header_timeout
            )
            self.close()

    def close(self) -> None:
        """Close the connection now and stop counting it."""
        self.owner.conns.pop(self, None)
        self.transport.abort()

    def begin(self, request: web.BaseRequest) -> None:
        """Note that ``request``'s headers are in; start its body's deadline if its body is still arriving."""
        loop = asyncio.get_running_loop()
        self.request = request
        self.waiting_since = self.body_started = loop.time()
        if not request.content.is_eof():
            self._check_body()

    def end(self) -> None:
        """Note that the request has been answered: the connection waits for the next one."""
        self.request = None
        self.waiting_since = asyncio.get_running_loop().time()
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None

    def _check_body(self) -> None:
        """Cut the body off past its deadline or rate; else check again when it could next fall behind."""
        self.body_timer = None
        request = self.request
        if request is None or request.content.is_eof() or request.content.exception() is not None:
            return
        limits = self.owner.limits
        loop = asyncio.get_running_loop()
        elapsed = loop.time() - self.body_started
        received = request.content.total_bytes
        rate = limits.body_min_rate
        if elapsed >= limits.body_timeout:
            self._cut_off(f"the request body took over {limits.body_timeout:g} s")
            return
        if rate and elapsed >= limits.body_grace and received < rate * elapsed:
            self._cut_off(f"the request body arrived slower than {rate:g} bytes/s")
            return
        due = limits.body_timeout
        if rate:  # with no more bytes, the average falls under the rate at received / rate
            due = min(due, max(limits.body_grace, received / rate))
        self.body_timer = loop.call_later(max(due - elapsed, MIN_CHECK_S), self._check_body)

    def _cut_off(self, reason: str) -> None:
        assert self.request is not None
        self.owner.count("body_timeout", "%d request body(ies) cut off: %s", reason)
        self.owner.conns.pop(self, None)  # room for another at once: this one is closing
        self.request.content.set_exception(BodyTimeout(reason))  # its reader answers 408, then the link closes
        self.close_timer = asyncio.get_running_loop().call_later(CLOSE_AFTER_S, self._close_if_open)

    def _close_if_open(self) -> None:
        self.close_timer = None
        if not self.transport.is_closing():
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        """Pass bytes on; the header deadline ends once the first request's headers are complete."""
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
        """Uncount the connection, stop its timers and tell aiohttp."""
        for timer in (self.deadline, self.body_timer, self.close_timer):
            if timer is not None:
                timer.cancel()
        self.deadline = self.body_timer = self.close_timer = None
        self.owner.conns.pop(self, None)
        if self.inner is not None:
            self.inner.connection_lost(exc)
            self.inner = None


class GuardedConnections:
    """A protocol factory for ``loop.create_server`` that applies the connection limits to aiohttp's."""

    def __init__(self, factory: Callable[[], Any], limits: Limits) -> None:
        self.factory = factory
        self.limits = limits
        self.conns: dict[GuardedProtocol, None] = {}  # the counted connections, oldest first
        self.closed = dict.fromkeys(CLOSE_REASONS, 0)

    def __call__(self) -> GuardedProtocol:
        """Return the protocol of a new connection."""
        return GuardedProtocol(self)

    def make_room(self) -> bool:
        """Close the waiting connection that has waited longest; say whether there was one."""
        victim = min((c for c in self.conns if not c.busy), key=lambda c: c.waiting_since, default=None)
        if victim is None:
            return False
        self.count("evicted", "%d waiting connection(s) closed to make room for new ones (%d open)", len(self.conns))
        victim.close()
        return True

    def count(self, reason: str, message: str, *args: object) -> None:
        """Count a connection closed for ``reason``; log the 1st, 10th, 100th and every 1000th."""
        self.closed[reason] += 1
        seen = self.closed[reason]
        if seen in (1, 10, 100) or seen % 1000 == 0:
            log.warning(message, seen, *args)


class ConnectionCollector(Collector):
    """Reads the connection counts at scrape time."""

    def __init__(self, connections: GuardedConnections) -> None:
        self.connections = connections

    def collect(self) -> Iterator[Metric]:
        """Yield the open connections and those closed by a limit, by reason."""
        closed = CounterMetricFamily(
            "mlx_agent_connections_closed",
            "Connections the front closed for a limit: limit (full, none waiting), evicted (to make room), "
            "header_timeout, body_timeout.",
            labels=["reason"],
        )
        for reason, count in self.connections.closed.items():
            closed.add_metric([reason], count)
        open_now = GaugeMetricFamily("mlx_agent_open_connections", "Connections open now.")
        open_now.add_metric([], len(self.connections.conns))
        yield from (closed, open_now)


def protocol_of(request: web.BaseRequest) -> GuardedProtocol | None:
    """Return the guarded connection a request came on (None under a server that does not guard them)."""
    transport = request.transport
    protocol = transport.get_protocol() if transport is not None else None
    return protocol if isinstance(protocol, GuardedProtocol) else None


@web.middleware
async def track_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tell the connection its request began and ended; close it after an answer that left the body unread."""
    connection = protocol_of(request)
    if connection is None:
        return await handler(request)
    connection.begin(request)
    try:
        response = await handler(request)
        if not request.content.is_eof():
            response.force_close()  # the rest of a refused (or cut-off) body is never read
        return response
    finally:
        connection.end()
