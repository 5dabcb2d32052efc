"""``/v1/chat/completions`` and ``/v1/completions`` as the worker speaks them, plus ``/v1/models`` and ``/health``.

The body is checked and prepared (``openai.request.prepare``), sent through ``Upstream``, and the reply comes
back as the worker wrote it, with two rewrites: the model is named as the client named it, and, when API
keys are in use, ``cached_tokens`` is held to what the caller's own key explains (``cache_privacy``). Streams
go through ``PassThrough``, the identity translator: events are forwarded as written, rewritten only where
those two rules touch them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
from aiohttp import web

from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.http_errors import error_response, json_response, refusal_response
from mlx_agent.gateway.openai.request import PreparedRequest, prepare
from mlx_agent.gateway.security import API_KEY_ID
from mlx_agent.gateway.sse import DATA, DONE, Accountant
from mlx_agent.gateway.upstream import Upstream, read_json_body
from mlx_agent.wire import WORKER_MODEL_NAME

WORKER_MODEL_FIELD = b'"model": "' + WORKER_MODEL_NAME.encode() + b'"'


class PassThrough:
    """The identity translator of a chat or text completion stream (``sse.StreamTranslator``)."""

    def __init__(self, prepared: PreparedRequest, account: Accountant | None) -> None:
        self.ended = False
        self.account = account
        self.usage_requested = prepared.usage_requested
        self.model_field = None
        if prepared.client_model is not None:
            self.model_field = b'"model": ' + json.dumps(prepared.client_model).encode()

    def start(self) -> bytes:
        """Return nothing: chat completion streams have no opening event."""
        return b""

    def keepalive(self, event: bytes) -> bytes:
        """Return the worker's keepalive comment as it was written."""
        return event + b"\n\n"

    def data(self, payload: bytes) -> bytes:
        """Return one chunk as the worker wrote it, the model renamed and usage bounded where needed."""
        if self.model_field is not None:
            payload = payload.replace(WORKER_MODEL_FIELD, self.model_field)
        if self.account is not None and payload.startswith(b"{") and b'"usage"' in payload:
            try:
                doc: Any = json.loads(payload)
            except ValueError:
                return DATA + payload + b"\n\n"
            if isinstance(doc, dict) and isinstance(doc.get("usage"), dict):
                self.account(doc)
                if not self.usage_requested and doc.get("choices") == []:
                    return b""  # the front asked for this chunk for its own accounting
                payload = json.dumps(doc).encode()
        return DATA + payload + b"\n\n"

    def finish(self) -> bytes:
        """Return the ``[DONE]`` event."""
        self.ended = True
        return DONE + b"\n\n"

    def fail(self, message: str) -> bytes:
        """Return an error event, which the OpenAI clients raise."""
        self.ended = True
        error = {"error": {"message": message, "type": "server_error", "param": None, "code": "worker_failed"}}
        return DATA + json.dumps(error).encode() + b"\n\n"


class OpenAiApi:
    """The handlers of the OpenAI-style endpoints the worker serves itself."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.created = int(time.time())

    async def health(self, request: web.Request) -> web.Response:
        """Answer 200 while the front listens, whatever the model's state."""
        return json_response({"status": "ok", "model_state": self.upstream.lifecycle.state})

    async def models(self, request: web.Request) -> web.Response:
        """List the one model, loaded or not."""
        return json_response({"object": "list", "data": [
            {"id": self.upstream.config.model_id, "object": "model", "created": self.created,
             "owned_by": "mlx-agent"}]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """Forward a chat completion."""
        return await self._forward(request, "chat", "/v1/chat/completions")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """Forward a text completion."""
        return await self._forward(request, "completions", "/v1/completions")

    async def _forward(self, request: web.Request, endpoint: str, path: str) -> web.StreamResponse:
        config = self.upstream.config
        try:
            body = await read_json_body(request)
            prepared = prepare(body, endpoint=endpoint, names=config.model_names, max_tokens=config.max_tokens,
                               force_usage=request.get(API_KEY_ID) is not None)
            account = self.upstream.accountant(request, endpoint, body)
            if prepared.stream:
                return await self.upstream.stream(request, prepared, PassThrough(prepared, account), path)
            return await self._plain(prepared, account, path)
        except RequestRefused as refusal:
            return refusal_response(refusal)

    async def _plain(self, prepared: PreparedRequest, account: Accountant | None, path: str) -> web.Response:
        async with self.upstream.worker_request(prepared.body, path, stream=False) as (upstream, worker):
            try:
                raw = await upstream.read()
            except (aiohttp.ClientError, OSError) as exc:
                await self.upstream.notice_exit(worker)
                return error_response(502, f"the model worker failed while answering: {exc}", code="worker_failed",
                                      type_="server_error")
            status, content_type = upstream.status, upstream.content_type
        if status == 200 and (prepared.client_model is not None or account is not None):
            raw = _rewrite_json(raw, prepared, account)
        return web.Response(body=raw, status=status, content_type=content_type or "application/json")


def _rewrite_json(raw: bytes, prepared: PreparedRequest, account: Accountant | None) -> bytes:
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(doc, dict):
        return raw
    if prepared.client_model is not None and doc.get("model") == WORKER_MODEL_NAME:
        doc["model"] = prepared.client_model
    if account is not None:
        account(doc)
    return json.dumps(doc).encode()
