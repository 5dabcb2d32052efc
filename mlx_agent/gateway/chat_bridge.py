"""The worker's chat completions behind another API: send a translated request, read the reply or its stream.

The Anthropic Messages and OpenAI Responses endpoints translate their request into a chat-completions body,
and their reply back. What they share lives here, on top of the proxy's own pieces (``prepare``: model
check and ``max_tokens`` clamp; ``Proxy.worker_request``: load on demand and open-request accounting;
the ``PromptLedger``: per-key ``cached_tokens``):

* ``ChatBridge.complete`` returns the worker's JSON reply, or raises ``RequestRefused`` carrying the worker's
  error status and message.
* ``ChatBridge.stream`` feeds each worker SSE event to a ``StreamTranslator`` as it arrives and writes what
  the translator returns at once, one write per read from the worker: nothing waits for the whole answer.
  A stream that ends without ``data: [DONE]`` gets the translator's failure events.

A stream always asks the worker for its usage chunk (the translated APIs report usage at the end).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from mlx_agent.gateway.cache_privacy import PromptShape
from mlx_agent.gateway.proxy import Proxy
from mlx_agent.gateway.request_body import PreparedRequest, prepare
from mlx_agent.gateway.responses import RequestRefused
from mlx_agent.gateway.security import API_KEY_ID
from mlx_agent.gateway.worker import WorkerProcess

CHAT_PATH = "/v1/chat/completions"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE = b"data: [DONE]"


class StreamTranslator(Protocol):
    """Turns the worker's chat-completion chunks into another API's stream events (bytes, ready to write)."""

    ended: bool  # a terminal event (end or failure) was written; nothing more may follow

    def start(self) -> bytes:
        """Return the events that open the stream (sent before the worker's first token)."""

    def keepalive(self) -> bytes:
        """Return what a worker keepalive comment becomes."""

    def chunk(self, doc: dict[str, Any]) -> bytes:
        """Return the events for one chat-completion chunk."""

    def finish(self) -> bytes:
        """Return the closing events, after the worker's ``[DONE]``."""

    def fail(self, message: str) -> bytes:
        """Return the events that end a broken stream with an error."""


def read_error(status: int, doc: object) -> RequestRefused:
    """Return the refusal that carries a worker's error reply (status, message, type, code, param)."""
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or f"the model worker answered {status}")
        type_ = str(error.get("type") or ("invalid_request_error" if status < 500 else "server_error"))
        code = str(error.get("code") or "worker_error")
        param = error.get("param") if isinstance(error.get("param"), str) else None
        return RequestRefused(status, message, code=code, type_=type_, param=param)
    message = error if isinstance(error, str) else f"the model worker answered {status}"
    return RequestRefused(status, message, code="worker_error",
                          type_="invalid_request_error" if status < 500 else "server_error")


async def read_json_body(request: web.Request) -> Any:
    """Return the parsed request body; raise ``RequestRefused`` (400 ``invalid_json``) if it is not JSON."""
    raw = await request.read()
    try:
        return json.loads(raw)
    except ValueError:
        raise RequestRefused(400, "the request body is not valid JSON", code="invalid_json", param="body") from None


class ChatBridge:
    """Sends translated chat-completion bodies to the worker through the proxy's accounting."""

    def __init__(self, host: Proxy) -> None:
        self.host = host

    def prepare(self, body: dict[str, Any]) -> PreparedRequest:
        """Check the model name, clamp ``max_tokens`` and ask a stream for its usage chunk."""
        return prepare(body, endpoint="chat", names=self.host.config.model_names,
                       max_tokens=self.host.config.max_tokens, force_usage=True)

    def _shape(self, request: web.Request, prepared: PreparedRequest) -> tuple[str | None, PromptShape | None]:
        key_id: str | None = request.get(API_KEY_ID)
        if key_id is None or self.host.ledger is None:
            return None, None
        return key_id, PromptShape.of("chat", prepared.body)

    def _account(self, key_id: str | None, shape: PromptShape | None, doc: dict[str, Any]) -> None:
        ledger = self.host.ledger
        if key_id is not None and shape is not None and ledger is not None and isinstance(doc.get("usage"), dict):
            ledger.rewrite_usage(key_id, shape, doc["usage"])

    async def complete(self, request: web.Request, prepared: PreparedRequest) -> dict[str, Any]:
        """Return the worker's (non-streamed) reply, its usage held to what the caller's key may see."""
        key_id, shape = self._shape(request, prepared)
        async with self.host.worker_request(prepared.body, CHAT_PATH, stream=False) as (upstream, worker):
            try:
                raw = await upstream.read()
            except (aiohttp.ClientError, OSError) as exc:
                await self.host.notice_exit(worker)
                raise RequestRefused(502, f"the model worker failed while answering: {exc}", code="worker_failed",
                                     type_="server_error") from exc
            status = upstream.status
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if status != 200:
            raise read_error(status, doc)
        if not isinstance(doc, dict) or not isinstance(doc.get("choices"), list) or not doc["choices"]:
            raise RequestRefused(502, "the model worker's reply has no choices", code="worker_failed",
                                 type_="server_error")
        self._account(key_id, shape, doc)
        return doc

    async def stream(self, request: web.Request, prepared: PreparedRequest,
                     translator: StreamTranslator) -> web.StreamResponse:
        """Stream the worker's answer through ``translator``; an error before the first event raises."""
        key_id, shape = self._shape(request, prepared)
        async with self.host.worker_request(prepared.body, CHAT_PATH, stream=True) as (upstream, worker):
            if upstream.status != 200 or upstream.content_type != "text/event-stream":
                try:
                    raw = await upstream.read()
                    doc = json.loads(raw)
                except (aiohttp.ClientError, OSError, ValueError):
                    doc = None
                raise read_error(upstream.status if upstream.status != 200 else 502, doc)
            response = web.StreamResponse(status=200, headers=SSE_HEADERS)
            await response.prepare(request)
            await self._pump(request, response, upstream, worker, translator, key_id, shape)
            return response

    async def _pump(self, request: web.Request, response: web.StreamResponse, upstream: aiohttp.ClientResponse,
                    worker: WorkerProcess, translator: StreamTranslator, key_id: str | None,
                    shape: PromptShape | None) -> None:
        pending = b""
        done = False
        failure: str | None = None
        try:
            await response.write(translator.start())
            async for data in upstream.content.iter_any():
                pending += data
                out: list[bytes] = []
                while (end := pending.find(b"\n\n")) >= 0:
                    event, pending = pending[:end], pending[end + 2:]
                    if translator.ended:
                        continue
                    if event.startswith(DONE):
                        done = True
                        out.append(translator.finish())
                    elif event.startswith(b":"):
                        out.append(translator.keepalive())
                    elif event.startswith(b"data: "):
                        out.append(self._translate(event[6:], translator, key_id, shape))
                if out:
                    await response.write(b"".join(out))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if isinstance(exc, ConnectionResetError) and request.transport is None:
                return  # the client went away; leaving the worker's context closes its stream
            failure = f"the model worker's stream broke: {exc}"
        if request.transport is None or request.transport.is_closing():
            return
        if not translator.ended:
            if not done:
                await self.host.notice_exit(worker)
            with contextlib.suppress(ConnectionResetError):
                await response.write(translator.fail(
                    failure or "the model worker ended the stream before it was complete"))
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()

    def _translate(self, data: bytes, translator: StreamTranslator, key_id: str | None,
                   shape: PromptShape | None) -> bytes:
        try:
            doc = json.loads(data)
        except ValueError:
            return b""
        if not isinstance(doc, dict):
            return b""
        error = doc.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            return translator.fail(str(message or "the model worker failed while answering"))
        self._account(key_id, shape, doc)
        return translator.chunk(doc)


def first_choice(doc: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Yield the delta and finish reason of choice 0 of a streamed chat-completion chunk (n is always 1)."""
    for choice in doc.get("choices") or []:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            yield choice.get("delta") or {}, choice.get("finish_reason")


def sse(event: str, data: dict[str, Any]) -> bytes:
    """Return one server-sent event with an ``event:`` name and a compact JSON ``data:`` line."""
    return b"event: " + event.encode() + b"\ndata: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"
