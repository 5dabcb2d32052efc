"""Model endpoints: check the request, load on demand, forward to the worker, pass the reply back.

Streams pass through as they arrive: each read from the worker is forwarded at once, cut only at SSE event
boundaries (so a usage chunk can be rewritten whole); keepalive comments pass as they are. A stream that
ends without ``data: [DONE]`` (the worker died or hung up) ends with an ``error`` event, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from mlx_agent.gateway.cache_privacy import PromptLedger, PromptShape
from mlx_agent.gateway.config import GatewayConfig
from mlx_agent.gateway.lifecycle import Lifecycle
from mlx_agent.gateway.request_body import WORKER_MODEL_NAME, PreparedRequest, prepare
from mlx_agent.gateway.responses import RequestRefused, error_body, error_response, json_response
from mlx_agent.gateway.security import API_KEY_ID
from mlx_agent.gateway.worker import WorkerProcess

DONE = b"data: [DONE]"
WORKER_MODEL_FIELD = b'"model": "default_model"'
EXIT_NOTICE_S = 1.0
UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10)


class Proxy:
    """The handlers of ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models`` and ``/health``."""

    def __init__(self, config: GatewayConfig, lifecycle: Lifecycle, session: aiohttp.ClientSession,
                 ledger: PromptLedger | None) -> None:
        self.config = config
        self.lifecycle = lifecycle
        self.session = session
        self.ledger = ledger  # only when API keys are in use
        self.created = int(time.time())

    async def health(self, request: web.Request) -> web.Response:
        """Answer 200 while the gateway listens, whatever the model's state."""
        return json_response({"status": "ok", "model_state": self.lifecycle.state})

    async def models(self, request: web.Request) -> web.Response:
        """List the one model, loaded or not."""
        return json_response({"object": "list", "data": [
            {"id": self.config.model_id, "object": "model", "created": self.created, "owned_by": "mlx-agent"}]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """Forward a chat completion."""
        return await self._forward(request, "chat", "/v1/chat/completions")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """Forward a text completion."""
        return await self._forward(request, "completions", "/v1/completions")

    async def _forward(self, request: web.Request, endpoint: str, path: str) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return error_response(400, "the request body is not valid JSON", code="invalid_json", param="body")
        key_id: str | None = request.get(API_KEY_ID)
        try:
            prepared = prepare(body, endpoint=endpoint, names=self.config.model_names,
                               max_tokens=self.config.max_tokens, force_usage=key_id is not None)
        except RequestRefused as refusal:
            return refusal.response()
        shape = PromptShape.of(endpoint, body) if key_id is not None else None
        try:
            async with self.worker_request(prepared.body, path, stream=prepared.stream) as (upstream, worker):
                if upstream.content_type == "text/event-stream":
                    return await self._stream(request, upstream, prepared, key_id, shape, worker)
                return await self._plain(upstream, prepared, key_id, shape, worker)
        except RequestRefused as refusal:
            return refusal.response()

    @contextlib.asynccontextmanager
    async def worker_request(self, body: dict[str, Any], path: str, *,
                             stream: bool) -> AsyncIterator[tuple[aiohttp.ClientResponse, WorkerProcess]]:
        """Send ``body`` to the worker (loading it first if needed) and hold the reply open while it is read.

        The request counts as open (``stream`` says which kind) from before the load until the block ends, so
        unload and idle unload wait for it. A refused or failed load, and a worker that does not answer
        (502 ``worker_failed``), raise ``RequestRefused``.
        """
        self.lifecycle.request_started(stream)
        try:
            worker = await self.lifecycle.acquire()
            try:
                upstream = await self.session.post(worker.base_url + path, timeout=UPSTREAM_TIMEOUT,
                                                   data=json.dumps(body).encode(),
                                                   headers={"Content-Type": "application/json"})
            except (aiohttp.ClientError, OSError) as exc:
                await self.notice_exit(worker)
                raise RequestRefused(502, f"the model worker did not answer: {exc}", code="worker_failed",
                                     type_="server_error") from exc
            async with upstream:
                yield upstream, worker
        finally:
            self.lifecycle.request_finished(stream)

    async def _plain(self, upstream: aiohttp.ClientResponse, prepared: PreparedRequest, key_id: str | None,
                     shape: PromptShape | None, worker: WorkerProcess) -> web.Response:
        try:
            raw = await upstream.read()
        except (aiohttp.ClientError, OSError) as exc:
            await self.notice_exit(worker)
            return _worker_error(502, f"the model worker failed while answering: {exc}")
        if upstream.status == 200 and (prepared.client_model is not None or key_id is not None):
            raw = self._rewrite_json(raw, prepared, key_id, shape)
        return web.Response(body=raw, status=upstream.status,
                            content_type=upstream.content_type or "application/json")

    def _rewrite_json(self, raw: bytes, prepared: PreparedRequest, key_id: str | None,
                      shape: PromptShape | None) -> bytes:
        try:
            doc = json.loads(raw)
        except ValueError:
            return raw
        if not isinstance(doc, dict):
            return raw
        if prepared.client_model is not None and doc.get("model") == WORKER_MODEL_NAME:
            doc["model"] = prepared.client_model
        if key_id is not None and shape is not None and self.ledger is not None and "usage" in doc:
            self.ledger.rewrite_usage(key_id, shape, doc["usage"])
        return json.dumps(doc).encode()

    async def _stream(self, request: web.Request, upstream: aiohttp.ClientResponse, prepared: PreparedRequest,
                      key_id: str | None, shape: PromptShape | None, worker: WorkerProcess) -> web.StreamResponse:
        response = web.StreamResponse(status=upstream.status, headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        await response.prepare(request)
        model_field = None
        if prepared.client_model is not None:
            model_field = b'"model": ' + json.dumps(prepared.client_model).encode()
        pending = b""
        done = False
        failure: str | None = None
        try:
            async for chunk in upstream.content.iter_any():
                pending += chunk
                out = []
                while (end := pending.find(b"\n\n")) >= 0:
                    event, pending = pending[:end + 2], pending[end + 2:]
                    if event.startswith(DONE):
                        done = True
                    elif model_field is not None:
                        event = event.replace(WORKER_MODEL_FIELD, model_field)
                    if key_id is not None and event.startswith(b"data: {") and b'"usage"' in event:
                        event = self._rewrite_usage_event(event, prepared, key_id, shape)
                    out.append(event)
                if out:
                    await response.write(b"".join(out))
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            if isinstance(exc, ConnectionResetError) and request.transport is None:
                return response  # the client went away; leaving the context closes the worker's stream
            failure = f"the model worker's stream broke: {exc}"
        if request.transport is None or request.transport.is_closing():
            return response
        if not done:
            await self.notice_exit(worker)
            message = failure or "the model worker ended the stream before it was complete"
            error = error_body(message, type_="server_error", code="worker_failed")
            with contextlib.suppress(ConnectionResetError):
                await response.write(b"data: " + json.dumps(error).encode() + b"\n\n")
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    def _rewrite_usage_event(self, event: bytes, prepared: PreparedRequest, key_id: str,
                             shape: PromptShape | None) -> bytes:
        try:
            doc: Any = json.loads(event[6:])
        except ValueError:
            return event
        if not isinstance(doc, dict) or not isinstance(doc.get("usage"), dict):
            return event
        if shape is not None and self.ledger is not None:
            self.ledger.rewrite_usage(key_id, shape, doc["usage"])
        if not prepared.usage_requested and doc.get("choices") == []:
            return b""  # the gateway asked for this chunk for its own accounting
        return b"data: " + json.dumps(doc).encode() + b"\n\n"

    async def notice_exit(self, worker: WorkerProcess) -> None:
        """Give a worker that just hung up a moment to be seen exiting, so the next request loads afresh."""
        deadline = time.monotonic() + EXIT_NOTICE_S
        while worker.exited() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        self.lifecycle.check_worker()


def _worker_error(status: int, message: str) -> web.Response:
    return error_response(status, message, code="worker_failed", type_="server_error")
