"""Server-sent events: the one pump that carries a worker's stream to a client, through a translator.

Every streamed endpoint (chat and text completions as they are, Anthropic Messages and OpenAI Responses
translated) reads the worker's chat-completion stream the same way: ``pump`` cuts it at event boundaries as
it arrives and hands each event to the endpoint's ``StreamTranslator``, writing what the translator returns
at once, one write per read from the worker; nothing waits for the whole answer. The translator is chosen
by the endpoint, in one place (its handler), as httpx chooses a transport.

A long prompt must not look like a dead server (agents give up on a stream that shows nothing for a while,
and send the whole prompt again). ``ClientStream`` sends the client's head and the stream's opening events as
soon as the worker's answer begins, or ``KEEPALIVE_S`` after the request arrived if it has not (a load, a
queue, a prefill), and from then on a keep-alive (``StreamTranslator.keepalive``) whenever nothing else was
written for ``KEEPALIVE_S``: a client sees bytes within ``2 * KEEPALIVE_S`` of any other, however long the
prompt takes. The cost is that an error the worker answers after the head was sent arrives as the stream's
error event, not as an HTTP status; the common refusals (a bad body, an unknown model, a prompt longer than the
context) come within ``KEEPALIVE_S`` and keep their status.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from mlx_agent.gateway.models.worker_stream import WorkerReply
from mlx_agent.gateway.observe.request_log import Exchange, exchange_of
from mlx_agent.wire import UNPARSED_TOOL_CALLS

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]"
DATA = b"data: "
HIGH_WATER, LOW_WATER = 64 * 1024, 16 * 1024  # bytes waiting for a client before the worker is paused, resumed
DRAIN_POLL_S = 0.005
KEEPALIVE_S = 2.0  # the client's head is sent this long after arrival at the latest; then bytes at least every 2x
KEEPALIVE = b": keepalive"  # the front's own keep-alive, as a worker writes one (an SSE comment)
UNPARSED = UNPARSED_TOOL_CALLS.encode()
Accountant = Callable[[dict[str, Any]], None]  # sees each chunk with usage first (per-key cached_tokens)


class StreamTranslator(Protocol):
    """Turns the worker's stream events into the client's, as bytes ready to write."""

    ended: bool  # a terminal event (end or failure) was written; nothing more may follow

    def start(self) -> bytes:
        """Return the events that open the stream (sent before the worker's first token)."""

    def keepalive(self, event: bytes) -> bytes:
        """Return what a keepalive comment (``event``, as written; the worker's or ``KEEPALIVE``) becomes."""

    def data(self, payload: bytes) -> bytes:
        """Return the events for one ``data:`` payload of the worker (JSON text, as written)."""

    def finish(self) -> bytes:
        """Return the closing events, after the worker's ``[DONE]``."""

    def fail(self, message: str) -> bytes:
        """Return the events that end a broken stream with an error."""


class ChunkTranslator:
    """The base of translators that read each chunk as JSON: errors end the stream, usage is observed first.

    ``chunk`` reads a chat-completion chunk the one way every translator does: the usage kept, and choice 0's
    reasoning, content and tool calls handed to ``reasoning``, ``content`` and ``tool_call`` in that order, then
    its finish reason kept and ``finished`` told. A translator overrides the parts it turns into events.
    """

    ended = False

    def __init__(self, on_usage: Accountant | None = None) -> None:
        self.on_usage = on_usage
        self.usage: object = None  # the worker's last usage (it reports usage only at the end)
        self.finish_reason: object = None

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
        """Return the events for one chat-completion chunk (the class docstring)."""
        if isinstance(doc.get("usage"), dict):
            self.usage = doc["usage"]
        out: list[bytes] = []
        for delta, finish_reason in first_choice(doc):
            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            if isinstance(reasoning, str) and reasoning:
                self.reasoning(reasoning, out)
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.content(content, out)
            for position, call in enumerate(delta.get("tool_calls") or []):
                if isinstance(call, dict):
                    self.tool_call(call, position, out)
            if finish_reason is not None:
                self.finish_reason = finish_reason
                self.finished(out)
        return b"".join(out)

    def reasoning(self, text: str, out: list[bytes]) -> None:
        """Add the events for a piece of separated reasoning to ``out`` (none by default)."""

    def content(self, text: str, out: list[bytes]) -> None:
        """Add the events for a piece of content to ``out`` (none by default)."""

    def tool_call(self, call: dict[str, Any], position: int, out: list[bytes]) -> None:
        """Add the events for a tool-call fragment (``position``: its place in the delta) to ``out``."""

    def finished(self, out: list[bytes]) -> None:
        """Add the events a finish reason brings to ``out`` (none by default; the end comes with ``finish``)."""

    def limit_lowered(self, granted: int) -> None:
        """Learn that the request's own reply limit was lowered to ``granted`` (``limit_notice``)."""

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
        pending = self.pending + data if self.pending else data  # an event per read is the rule: no copy
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
                payload = event[len(DATA) :]
                if self.exchange is not None:
                    self.exchange.token()  # the first one's time, and each counted in the model's samples
                    if UNPARSED in payload:  # rare: parse only the chunk that carries the marker
                        self.exchange.unparsed(_json(payload), "delta")
                out.append(translator.data(payload))
        self.pending = pending
        if translator.ended and self.exchange is not None:
            self.exchange.completed = 200  # its last event is out: a client may close now (Codex does)
        return b"".join(out)


def _json(payload: bytes) -> object:
    try:
        return json.loads(payload)
    except ValueError:
        return None


class ClientWriter:
    """Writes a stream to its client as it comes, framed for the connection, behind no buffer but the socket's.

    Each write goes to the transport at once, from the callback that read the worker (``worker_stream``):
    chunked on HTTP/1.1 (``ClientStream`` turns chunking on before the head is sent), as is on HTTP/1.0.
    A client that reads slower than the worker writes pauses the worker's connection until it catches up.
    Once the head is sent, a timer writes a keep-alive whenever a whole ``KEEPALIVE_S`` passed without a write.
    """

    def __init__(self, request: web.Request, result: PumpResult) -> None:
        self.request = request
        self.reply: WorkerReply | None = None  # set once the worker's answer has begun
        self.result = result
        self.chunked = request.version >= aiohttp.HttpVersion11
        self.draining: asyncio.Task[None] | None = None
        self.writes = 0  # counted, not timed: the hot path pays an increment, the timer compares
        self.seen = 0
        self.translator: StreamTranslator | None = None
        self.beat: asyncio.TimerHandle | None = None

    def write(self, out: bytes) -> None:
        """Send ``out`` to the client; a client gone ends the worker's reply (which stops its generation)."""
        transport = self.request.transport
        if transport is None or transport.is_closing():
            self.result.client_gone = True
            if self.reply is not None:
                self.reply.close()
            return
        self.writes += 1
        transport.write(b"%x\r\n%b\r\n" % (len(out), out) if self.chunked else out)
        if self.draining is None and self.reply is not None and transport.get_write_buffer_size() > HIGH_WATER:
            self.reply.pause()
            self.draining = asyncio.ensure_future(self._drain(transport, self.reply))

    async def _drain(self, transport: asyncio.BaseTransport, reply: WorkerReply) -> None:
        # aiohttp keeps its own drain to itself; a behind client is rare enough to poll for
        while not transport.is_closing() and transport.get_write_buffer_size() > LOW_WATER:  # type: ignore[attr-defined]
            await asyncio.sleep(DRAIN_POLL_S)
        self.draining = None
        reply.resume()

    def heartbeat(self, translator: StreamTranslator) -> None:
        """Write ``translator``'s keep-alive whenever ``KEEPALIVE_S`` pass without a write, until it ends."""
        self.translator = translator
        self.seen = self.writes
        self.beat = asyncio.get_running_loop().call_later(KEEPALIVE_S, self._beat)

    def _beat(self) -> None:
        translator = self.translator
        if translator is None or translator.ended or self.result.client_gone:
            self.beat = None
            return
        if self.writes == self.seen and self.draining is None:  # a client behind has bytes waiting already
            self.write(translator.keepalive(KEEPALIVE))
        self.seen = self.writes
        self.beat = asyncio.get_running_loop().call_later(KEEPALIVE_S, self._beat)

    def close(self) -> None:
        """Stop the keep-alives and stop waiting for the client to catch up."""
        if self.draining is not None:
            self.draining.cancel()
        if self.beat is not None:
            self.beat.cancel()
            self.beat = None


class ClientStream:
    """The client's side of one stream: its head and opening events, sent once, early if the worker is slow.

    Made when the request is routed; ``open`` sends the head when the worker's answer begins, unless the timer
    did so already ``KEEPALIVE_S`` after arrival (module docstring). ``opened`` says whether the status is
    committed: until then a refusal is still an HTTP error.
    """

    def __init__(self, request: web.Request, translator: StreamTranslator, headers: Mapping[str, str]) -> None:
        self.request = request
        self.translator = translator
        self.headers = dict(headers)
        self.result = PumpResult()
        self.writer = ClientWriter(request, self.result)
        self.response: web.StreamResponse | None = None
        self.opening: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(KEEPALIVE_S, self._due)

    @property
    def opened(self) -> bool:
        """Whether the head (200, an event stream) was sent or is being sent."""
        return self.response is not None

    def _due(self) -> None:
        self.timer = None
        self.opening = asyncio.ensure_future(self._open({}, early=True))

    async def open(self, headers: Mapping[str, str] | None = None) -> web.StreamResponse:
        """Send the head with ``headers`` added and the opening events, unless the timer sent them already."""
        self.settle()
        if self.opening is not None:
            await self.opening  # the timer's: the head it sent has the headers known then
        elif self.response is None:
            await self._open(headers or {}, early=False)
        assert self.response is not None
        return self.response

    async def _open(self, headers: Mapping[str, str], *, early: bool) -> None:
        response = web.StreamResponse(status=200, headers={**SSE_HEADERS, **self.headers, **headers})
        if self.request.version >= aiohttp.HttpVersion11:
            response.enable_chunked_encoding()  # the writer frames its writes itself (ClientWriter)
        self.response = response
        try:
            await response.prepare(self.request)
        except ConnectionResetError:
            self.result.client_gone = True
            return
        opening = self.translator.start()
        if early and not opening:  # a stream with no opening event (chat completions) still shows it is alive
            opening = self.translator.keepalive(KEEPALIVE)
        if opening:
            self.writer.write(opening)
        self.writer.heartbeat(self.translator)

    def settle(self) -> None:
        """Stop the timer that would send the head early (the answer has begun, or the request failed)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def fail(self, message: str) -> web.StreamResponse:
        """End an opened stream with the translator's error event (a refusal after the head was sent)."""
        response = await self.open()
        self.result.failure = message
        self.writer.close()
        await end(response, self.translator, self.result)
        return response

    def close(self) -> None:
        """Stop every timer of the stream."""
        self.settle()
        self.writer.close()
        if self.opening is not None and not self.opening.done():
            self.opening.cancel()


async def pump(client: ClientStream, reply: WorkerReply) -> PumpResult:
    """Carry ``reply``'s events through the client's translator until the worker or the client ends."""
    request, result, writer = client.request, client.result, client.writer
    events = Events(client.translator, result, exchange_of(request))
    writer.reply = reply

    def forward(data: bytes) -> None:
        if out := events.feed(data):
            writer.write(out)

    try:
        failure = await reply.pipe(forward)
    finally:
        writer.close()
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
