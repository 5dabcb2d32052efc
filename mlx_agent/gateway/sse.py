"""Server-sent events: the one pump that carries a worker's stream to a client, through a translator.

Every streamed endpoint (chat and text completions as they are, Anthropic Messages and OpenAI Responses
translated) reads the worker's chat-completion stream the same way: ``pump`` cuts it at event boundaries as
it arrives and hands each event to the endpoint's ``StreamTranslator``, writing what the translator returns
at once, one write per read from the worker; nothing waits for the whole answer. The translator is chosen
by the endpoint, in one place (its handler), as httpx chooses a transport.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from mlx_agent.gateway.observe import exchange_of

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]"
DATA = b"data: "
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


async def pump(
    request: web.Request, response: web.StreamResponse, upstream: aiohttp.ClientResponse, translator: StreamTranslator
) -> PumpResult:
    """Carry ``upstream``'s events through ``translator`` to ``response`` until the worker or the client ends."""
    result = PumpResult()
    pending = b""
    exchange = exchange_of(request)
    try:
        opening = translator.start()
        if opening:
            await response.write(opening)
        content = upstream.content
        while data := await content.readany():
            pending += data
            out: list[bytes] = []
            while (end := pending.find(b"\n\n")) >= 0:
                event, pending = pending[:end], pending[end + 2 :]
                if translator.ended:
                    continue
                if event.startswith(DONE):
                    result.done = True
                    out.append(translator.finish())
                elif event.startswith(b":"):
                    out.append(translator.keepalive(event))
                elif event.startswith(DATA):
                    if exchange is not None and exchange.first_token is None:
                        exchange.token()
                    out.append(translator.data(event[len(DATA) :]))
            if out:
                await response.write(b"".join(out))
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        if isinstance(exc, ConnectionResetError) and request.transport is None:
            result.client_gone = True  # leaving the worker's context closes its stream
            return result
        result.failure = f"the model worker's stream broke: {exc}"
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
