"""Server-sent events: the one pump that carries a worker's stream to a client, through a translator.

Every streamed endpoint (chat and text completions as they are, Anthropic Messages and OpenAI Responses
translated) reads the worker's chat-completion stream the same way: ``pump`` cuts it at event boundaries as
it arrives and hands each event to the endpoint's ``StreamTranslator``, writing what the translator returns
at once, one write per read from the worker; nothing waits for the whole answer. The translator is chosen
by the endpoint, in one place (its handler), as httpx chooses a transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from mlx_agent.gateway.observe import Exchange, exchange_of
from mlx_agent.gateway.worker_stream import WorkerReply

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]"
DATA = b"data: "
HIGH_WATER, LOW_WATER = 64 * 1024, 16 * 1024  # bytes waiting for a client before the worker is paused, resumed
DRAIN_POLL_S = 0.005
Accountant = Callable[[dict[str, Any]], None]  # sees each chunk with usage first (per-key cached_tokens)


class StreamTranslator(Protocol):
    """Turns the worker's stream events into the client's, as bytes ready to write."""

    ended: bool  # a terminal event (end or failure) was written; nothing more may follow

    def start(self) -> bytes:
        """Return the events that open the stream (sent before the worker's first token)."""

    def keepalive(self, event: bytes) -> bytes:
        """Return what a worker keepalive comment (``event``, as written) becomes."""

    def data(self, payload: bytes) -> bytes:
        """Return the events for one ``data:`` payload of the worker (JSON text, as written)."""

    def finish(self) -> bytes:
        """Return the closing events, after the worker's ``[DONE]``."""

    def fail(self, message: str) -> bytes:
        """Return the events that end a broken stream with an error."""


class ChunkTranslator:
    """The base of translators that read each chunk as JSON: errors end the stream, usage is observed first."""

    ended = False

    def __init__(self, on_usage: Accountant | None = None) -> None:
        self.on_usage = on_usage

    def data(self, payload: bytes) -> bytes:
        """Parse one worker chunk; an ``error`` chunk fails the stream, any other goes to ``chunk``."""
        try:
            doc = json.loads(payload)
        except ValueError:
            return b""
        if not isinstance(doc, dict):
            return b""
        error = doc.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            return self.fail(str(message or "the model worker failed while answering"))
        if self.on_usage is not None and isinstance(doc.get("usage"), dict):
            self.on_usage(doc)
        return self.chunk(doc)

    def chunk(self, doc: dict[str, Any]) -> bytes:
        """Return the events for one chat-completion chunk."""
        raise NotImplementedError

    def fail(self, message: str) -> bytes:
        """Return the events that end a broken stream with an error."""
        raise NotImplementedError


@dataclass
class PumpResult:
    """How a pumped stream ended: the worker's ``[DONE]`` seen, the worker broke off, or the client left."""

    done: bool = False
    failure: str | None = None
    client_gone: bool = False


class Events:
    """Cuts a worker's stream at event boundaries and returns what the translator makes of each event."""

    def __init__(self, translator: StreamTranslator, result: PumpResult, exchange: Exchange | None) -> None:
        self.translator = translator
        self.result = result
        self.exchange = exchange
        self.pending = b""

    def feed(self, data: bytes) -> bytes:
        """Take the next bytes of the worker's stream; return the client's bytes for every event they finish."""
        pending = self.pending + data
        translator = self.translator
        out: list[bytes] = []
        while (end := pending.find(b"\n\n")) >= 0:
            event, pending = pending[:end], pending[end + 2 :]
            if translator.ended:
                continue
            if event.startswith(DONE):
                self.result.done = True
                out.append(translator.finish())
            elif event.startswith(b":"):
                out.append(translator.keepalive(event))
            elif event.startswith(DATA):
                if self.exchange is not None and self.exchange.first_token is None:
                    self.exchange.token()
                out.append(translator.data(event[len(DATA) :]))
        self.pending = pending
        return b"".join(out)


class ClientWriter:
    """Writes a stream to its client as it comes, framed for the connection, behind no buffer but the socket's.

    Each write goes to the transport at once, from the callback that read the worker (``worker_stream``):
    chunked on HTTP/1.1 (``Upstream.stream`` turns chunking on before the head is sent), as is on HTTP/1.0.
    A client that reads slower than the worker writes pauses the worker's connection until it catches up.
    """

    def __init__(self, request: web.Request, reply: WorkerReply, result: PumpResult) -> None:
        self.request = request
        self.reply = reply
        self.result = result
        self.chunked = request.version >= aiohttp.HttpVersion11
        self.draining: asyncio.Task[None] | None = None

    def write(self, out: bytes) -> None:
        """Send ``out`` to the client; a client gone ends the worker's reply (which stops its generation)."""
        transport = self.request.transport
        if transport is None or transport.is_closing():
            self.result.client_gone = True
            self.reply.close()
            return
        transport.write(b"%x\r\n%b\r\n" % (len(out), out) if self.chunked else out)
        if self.draining is None and transport.get_write_buffer_size() > HIGH_WATER:
            self.reply.pause()
            self.draining = asyncio.ensure_future(self._drain(transport))

    async def _drain(self, transport: asyncio.BaseTransport) -> None:
        # aiohttp keeps its own drain to itself; a behind client is rare enough to poll for
        while not transport.is_closing() and transport.get_write_buffer_size() > LOW_WATER:  # type: ignore[attr-defined]
            await asyncio.sleep(DRAIN_POLL_S)
        self.draining = None
        self.reply.resume()

    def close(self) -> None:
        """Stop waiting for the client to catch up."""
        if self.draining is not None:
            self.draining.cancel()


async def pump(
    request: web.Request, response: web.StreamResponse, reply: WorkerReply, translator: StreamTranslator
) -> PumpResult:
    """Carry ``reply``'s events through ``translator`` to the client until the worker or the client ends."""
    result = PumpResult()
    events = Events(translator, result, exchange_of(request))
    client = ClientWriter(request, reply, result)

    def forward(data: bytes) -> None:
        if out := events.feed(data):
            client.write(out)

    try:
        if opening := translator.start():
            client.write(opening)
        failure = await reply.pipe(forward)
    finally:
        client.close()
        reply.close()
    if not result.done and not result.client_gone:
        result.failure = failure
    if request.transport is None or request.transport.is_closing():
        result.client_gone = True
    return result


async def end(response: web.StreamResponse, translator: StreamTranslator, result: PumpResult) -> None:
    """Finish a pumped stream: a failure event if it broke off, then the end of the response."""
    if result.client_gone:
        return
    if not translator.ended:
        with contextlib.suppress(ConnectionResetError):
            await response.write(
                translator.fail(result.failure or "the model worker ended the stream before it was complete")
            )
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()


def first_choice(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Yield the delta and finish reason of choice 0 of a streamed chat-completion chunk (n is always 1)."""
    for choice in doc.get("choices") or []:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            yield choice.get("delta") or {}, choice.get("finish_reason")


def sse(event: str, data: dict[str, Any]) -> bytes:
    """Return one server-sent event with an ``event:`` name and a compact JSON ``data:`` line."""
    return b"event: " + event.encode() + b"\ndata: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
