"""A worker's streamed reply, read by callbacks: each piece of its body reaches a sink as it arrives.

A stream is the front's hot path: every token is one read from the worker and one write to the client. Read
through aiohttp's client, each token also costs a future, a task wake-up and a read-timeout reschedule; here
the transport's ``data_received`` feeds httptools' parser (which also undoes a worker's chunked encoding),
whose ``on_body`` hands the bytes straight to the sink, in the same callback. ``scripts/bench_gateway.py``
measures what that saves.

The request is sent once, with ``Connection: close``; the reply ends when the worker closes the connection
(or its framing says it is complete). Whether the stream itself was complete (``data: [DONE]``) is for the
pump to judge, not the framing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import httptools

from mlx_agent.wire import HOST

CONNECT_TIMEOUT_S = 10.0
JSON = "application/json"
Sink = Callable[[bytes], None]


class WorkerReply(asyncio.Protocol):
    """One request to a worker and its reply: status and headers, then the body, to a sink or kept."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self.headers_done: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[str | None] = loop.create_future()  # None, or how the reply broke off
        self.kept: list[bytes] = []  # the body, until a sink takes it
        self.sink: Sink | None = None
        self.sink_error: BaseException | None = None  # raised by the sink; ``pipe`` raises it again
        self.complete = False  # the reply's framing said it was complete
        self.on_progress: Callable[[], None] | None = None  # told of every piece of the body (``stall``)

    @property
    def content_type(self) -> str:
        """Return the reply's media type, without parameters."""
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the connection (asyncio)."""
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        """Parse what the worker sent; the parser calls back with the head and the body."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.close(f"the model worker's reply is not valid HTTP: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        """End the reply: complete if the connection closed cleanly, broken off if it failed."""
        self.transport = None
        how = f"the model worker's stream broke: {exc}" if exc is not None else None
        framed = "content-length" in self.headers or "transfer-encoding" in self.headers
        if how is None and framed and not self.complete:  # else the body ends where the connection does
            how = "the model worker closed the connection before its reply was complete"
        self.close(how)

    def on_header(self, name: bytes, value: bytes) -> None:
        """Keep one header of the reply (httptools)."""
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        """Take the status; the reply's head is complete."""
        self.status = self.parser.get_status_code()
        if not self.headers_done.done():
            self.headers_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        """Hand a piece of the body to the sink, or keep it until one is set."""
        if self.on_progress is not None:
            self.on_progress()
        if self.sink is None:
            self.kept.append(body)
            return
        try:
            self.sink(body)
        except BaseException as exc:  # not into the parser, which would take it for bad HTTP
            self.sink_error = exc
            self.close("the front failed while forwarding the stream")

    def on_message_complete(self) -> None:
        """Close the connection: the reply's framing says it is complete."""
        self.complete = True
        self.close()

    async def body(self) -> bytes:
        """Return the whole body; ConnectionError if the reply broke off."""
        how = await self.ended
        if how is not None:
            raise ConnectionError(how)
        return b"".join(self.kept)

    async def pipe(self, sink: Sink) -> str | None:
        """Hand the body to ``sink`` as it arrives; return when the reply ends (None, or how it broke off)."""
        self.sink = sink
        kept, self.kept = self.kept, []
        for piece in kept:
            self.on_body(piece)
        how = await self.ended
        if self.sink_error is not None:
            raise self.sink_error
        return how

    def pause(self) -> None:
        """Stop reading from the worker (its client is behind); the worker's own writes then wait."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume(self) -> None:
        """Read from the worker again."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def close(self, how: str | None = None) -> None:
        """End the reply: the connection is closed (a worker mid-answer sees its client leave)."""
        if not self.headers_done.done():
            self.headers_done.set_exception(ConnectionError(how or "the model worker closed the connection"))
        if not self.ended.done():
            self.ended.set_result(how)
        if self.transport is not None:
            self.transport.close()


def request_head(path: str, length: int, headers: Mapping[str, str], content_type: str = JSON) -> bytes:
    """Return the head of a POST of ``length`` bytes (JSON unless said), the connection closed after its reply."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {HOST}", f"Content-Type: {content_type}", f"Content-Length: {length}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def open_reply(
    where: str | int, path: str, body: bytes, headers: Mapping[str, str], content_type: str = JSON
) -> WorkerReply:
    """Send ``body`` (of ``content_type``) with ``headers`` to the worker at ``where`` (socket path, or port).

    Returns once the reply's head has come; raises OSError (``ConnectionError`` included) if the worker
    cannot be reached or hangs up before it.
    """
    loop = asyncio.get_running_loop()
    reply = WorkerReply()
    if isinstance(where, str):
        connect = loop.create_unix_connection(lambda: reply, where)
    else:
        connect = loop.create_connection(lambda: reply, HOST, where)
    try:
        transport, _ = await asyncio.wait_for(connect, CONNECT_TIMEOUT_S)
    except TimeoutError as exc:
        raise ConnectionError(f"no connection within {CONNECT_TIMEOUT_S:.0f} s") from exc
    try:
        transport.write(request_head(path, len(body), headers, content_type) + body)
        await reply.headers_done
    except BaseException:
        reply.close()
        raise
    return reply
