"""``/v1/chat/completions`` and ``/v1/completions`` as the worker speaks them, plus ``/v1/models`` and ``/health``.

The body is checked and prepared (``request.prepare``), sent through ``Upstream``, and the reply comes
back as the worker wrote it, with two rewrites: the model is named as the client named it, and, when API
keys are in use, ``cached_tokens`` is held to what the caller's own key explains (``cache_privacy``). Streams
go through ``PassThrough``, the identity translator: events are forwarded as written, rewritten only where
those two rules touch them. ``/v1/tokenize`` is prepared the same way and answered by the worker's tokenizer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from mlx_agent.agent_names import is_pattern
from mlx_agent.api_errors import Code, Family, error_body
from mlx_agent.bodies import Body, ChatBody, CompletionBody, TokenizeBody
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import json_response, refusal_response, refused, retry_headers
from mlx_agent.gateway.model_kinds import kind_of, paths_of
from mlx_agent.gateway.models.disk_check import add_disk
from mlx_agent.gateway.models.lifecycle import Lifecycle
from mlx_agent.gateway.openai.codex_models import catalogue, wants_catalogue
from mlx_agent.gateway.request import PreparedRequest
from mlx_agent.gateway.sse import DATA, DONE, Accountant
from mlx_agent.gateway.upstream import Upstream, read_error
from mlx_agent.wire import CHALLENGE_PARAM, MAX_CHALLENGE
from mlx_agent.worker_routes import WorkerRoute


class PassThrough:
    """The identity translator of a chat or text completion stream (``sse.StreamTranslator``)."""

    def __init__(self, prepared: PreparedRequest, account: Accountant | None) -> None:
        self.ended = False
        self.account = account
        self.usage_requested = prepared.usage_requested
        self.worker_field = b'"model": ' + json.dumps(prepared.worker_model).encode()
        self.model_field = b'"model": ' + json.dumps(prepared.client_model).encode()

    def start(self) -> bytes:
        """Return nothing: chat completion streams have no opening event."""
        return b""

    def keepalive(self, event: bytes) -> bytes:
        """Return the worker's keepalive comment as it was written."""
        return event + b"\n\n"

    def data(self, payload: bytes) -> bytes:
        """Return one chunk as the worker wrote it, the model renamed and usage bounded where needed."""
        payload = payload.replace(self.worker_field, self.model_field)
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
        error = error_body(Family.OPENAI, Code.WORKER_FAILED, message)
        return DATA + json.dumps(error).encode() + b"\n\n"


def window_fields(model: Mapping[str, Any], anthropic: bool) -> dict[str, int]:
    """Return a listing entry's context window and reply ceiling, in the fields clients read.

    OpenAI-shaped listings have no standard field: ``context_length`` is OpenRouter's and LM Studio's name,
    ``max_model_len`` vLLM's, and ``max_output_tokens`` says the longest reply. The Anthropic models API's
    ``max_input_tokens`` and ``max_tokens`` come with an ``anthropic-version`` header. A reply shares the window
    with its prompt, so the window is also the longest prompt; without a ceiling the window bounds the reply.
    """
    window, ceiling = model.get("context_window"), model.get("max_tokens_ceiling")
    most = min(ceiling, window) if ceiling and window else ceiling or window
    fields: dict[str, int] = {}
    if window:
        fields.update(context_length=window, max_model_len=window)
        if anthropic:
            fields["max_input_tokens"] = window
    if most:
        fields["max_output_tokens"] = most
        if anthropic:
            fields["max_tokens"] = most
    return fields


class OpenAiApi:
    """The handlers of the OpenAI-style endpoints the workers serve themselves, and the front's listings."""

    def __init__(self, upstream: Upstream, prove: Callable[[str], str]) -> None:
        self.upstream = upstream
        self.prove = prove  # the front's answer to a readiness challenge
        self.created = int(time.time())

    async def root(self, request: web.Request) -> web.Response:
        """Answer ``GET /`` and ``HEAD /`` (agents probe the base URL before their first request)."""
        return json_response({"status": "ok", "service": "mlx-agent", "models": self.upstream.fleet.names})

    async def health(self, request: web.Request) -> web.Response:
        """Answer 200 while the front listens; ``ready`` says every model it preloads is loaded.

        A model whose worker was found wedged makes it 503 (``status: "wedged"``, ``wedged`` names them) until a
        new worker of that model is ready.
        """
        fleet = self.upstream.fleet
        wedged = [m.name for m in fleet.models if m.wedged_pid is not None]
        doc: dict[str, Any] = {
            "status": "wedged" if wedged else "ok",
            "ready": fleet.ready,
            "model_state": fleet.models[0].state,
            "models": {m.name: m.state for m in fleet.models},
        }
        if wedged:
            doc["wedged"] = wedged
        add_disk(doc, fleet)
        challenge = request.query.get(CHALLENGE_PARAM)
        if challenge and len(challenge) <= MAX_CHALLENGE:
            doc["proof"] = self.prove(challenge)
        return json_response(doc, status=503 if wedged else 200)

    def _entries(self, request: web.Request) -> list[dict[str, Any]]:
        """Return the listing: each served name, then its literal aliases; glob aliases only under ``aliases``."""
        anthropic = "anthropic-version" in request.headers
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created))
        entries = []
        for model in self.upstream.fleet.models:
            aliases: list[str] = model.model["alias"]
            for name in (model.name, *(a for a in aliases if not is_pattern(a))):
                entry: dict[str, Any] = {
                    "id": name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "mlx-agent",
                    "state": model.state,
                    "kind": kind_of(model.model) or "text",
                    "endpoints": list(paths_of(model.model)),
                    **window_fields(model.model, anthropic),
                }
                if name == model.name:
                    entry["aliases"] = list(aliases)
                else:
                    entry["alias_of"] = model.name
                if anthropic:  # the Anthropic models API's fields, for clients that list through it
                    entry.update(type="model", display_name=name, created_at=created)
                entries.append(entry)
        return entries

    async def models(self, request: web.Request) -> web.Response:
        """List every served name and literal alias with its model's state and window, loaded or not.

        Codex's catalogue refresh (``?client_version=``) gets its own shape instead (``codex_models.py``).
        """
        if wants_catalogue(request.query):
            return json_response(catalogue([(m.name, m.model) for m in self.upstream.fleet.models]))
        entries = self._entries(request)
        doc: dict[str, Any] = {"object": "list", "data": entries}
        if "anthropic-version" in request.headers:
            doc.update(
                has_more=False,
                first_id=entries[0]["id"] if entries else None,
                last_id=entries[-1]["id"] if entries else None,
            )
        return json_response(doc)

    async def model(self, request: web.Request) -> web.Response:
        """Describe one served name or alias (a glob alias answers for every name it matches)."""
        name = request.match_info["model_id"]
        try:
            model = self.upstream.fleet.route(name)
        except RequestRefused as refusal:
            return refusal_response(refusal)
        entry = next((e for e in self._entries(request) if e["id"] == name), None)
        if entry is None:
            served = next(e for e in self._entries(request) if e["id"] == model.name)
            entry = {**{k: v for k, v in served.items() if k != "aliases"}, "id": name, "alias_of": model.name}
            if "display_name" in entry:
                entry["display_name"] = name
        return json_response(entry)

    async def chat(self, request: web.Request, body: ChatBody) -> web.StreamResponse:
        """Forward a chat completion."""
        return await self._forward(request, WorkerRoute.CHAT, body)

    async def completions(self, request: web.Request, body: CompletionBody) -> web.StreamResponse:
        """Forward a text completion."""
        return await self._forward(request, WorkerRoute.COMPLETIONS, body)

    async def tokenize(self, request: web.Request, body: TokenizeBody) -> web.StreamResponse:
        """Answer the tokens of a text or of messages as the model's worker reads them, and how many there are.

        The body is prepared as a chat's (its model routed, its content parts checked) and the worker tokenizes
        it (``runtime/serving/tokenize.py``); a worker of another runtime has no such path (its 404).
        """
        model, prepared = self.upstream.prepare(request, body.sent)
        sent: dict[str, Any] = {
            name: prepared.body[name] for name in ("model", "text", "messages") if name in prepared.body
        }
        try:
            doc = await self.upstream.worker_json(model, sent, WorkerRoute.TOKENIZE)
        except RequestRefused as refusal:
            if refusal.status == 404 and refusal.code == Code.WORKER_ERROR:
                raise refused(
                    Code.UNKNOWN_ENDPOINT,
                    f"the model '{model.name}' runs a runtime that does not tokenize; POST /v1/tokenize is answered "
                    "by mlx_lm's workers",
                    param="model",
                ) from None
            raise
        tokens = doc.get("tokens") if isinstance(doc, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            raise refused(Code.WORKER_FAILED, "the model worker's tokenize reply is malformed")
        return json_response(
            {"object": "tokens", "model": prepared.client_model, "tokens": tokens, "count": len(tokens)}
        )

    async def _forward(self, request: web.Request, route: WorkerRoute, body: Body) -> web.StreamResponse:
        """Send the body as it was sent (the worker reads the fields its declaration passes on) on ``route``."""
        sent = body.sent
        model, prepared = self.upstream.prepare(request, sent)
        account = self.upstream.accountant(request, route, sent)
        if prepared.stream:
            return await self.upstream.stream(request, model, prepared, PassThrough(prepared, account), route)
        return await self._plain(model, prepared, account, route)

    async def _plain(
        self, model: Lifecycle, prepared: PreparedRequest, account: Accountant | None, route: WorkerRoute
    ) -> web.Response:
        async with self.upstream.worker_request(model, prepared.body, route, stream=False) as (reply, worker):
            raw = await self.upstream.read_body(model, worker, reply)  # a refusal here is answered by _forward
            status, content_type = reply.status, reply.content_type
        if status == 200:
            raw = _rewrite_json(raw, prepared, account)
        elif not _is_openai_error(raw):  # mlx-vlm's FastAPI {"detail": ...}, or no JSON: the API's own shape
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
            return refusal_response(read_error(status, doc))
        # A worker's own OpenAI error passes as written, with the front's retry advice like every other refusal.
        return web.Response(
            body=raw, status=status, content_type=content_type or "application/json", headers=retry_headers(status)
        )


def _is_openai_error(raw: bytes) -> bool:
    """Say whether a worker's error body is an OpenAI error object (``{"error": {"message": ...}}``)."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return False
    return isinstance(doc, dict) and isinstance(doc.get("error"), dict) and isinstance(doc["error"].get("message"), str)


def _rewrite_json(raw: bytes, prepared: PreparedRequest, account: Accountant | None) -> bytes:
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(doc, dict):
        return raw
    if doc.get("model") == prepared.worker_model:
        doc["model"] = prepared.client_model
    if account is not None:
        account(doc)
    return json.dumps(doc).encode()
