"""Ollama's API on the front's port: ``/api/chat``, ``/api/generate``, the listings, and clear refusals.

Chat and generate are translated (``request``) into the worker's chat completions and go through the one
road every API takes (``Upstream``: routing, load on demand, open-request accounting, per-key
``cached_tokens``). The worker is always asked for a stream: a streamed answer is carried through the NDJSON
translator (``stream.OllamaStream``), and a non-streamed one is collected through the same translator and folded
into one object, so both have the same fields and the durations are measured the same way (first token
included). A request without a prompt loads the model (``done_reason: load``), or with ``keep_alive: 0`` unloads
it (``unload``), as Ollama's clients use it. After each request its ``keep_alive`` applies (``keep_alive``).

A model may be named with Ollama's ``:latest`` tag (``tiny:latest`` routes to ``tiny``). ``/api/version``
reports the Ollama API version this front speaks (``OLLAMA_API_VERSION``; clients gate features on it) and
mlx-agent's own. Pull, push, create, copy, delete and blobs answer 501 ``model_management_unsupported``: this
server serves the models its reviewed plan names, and never downloads or changes one.

Every error under ``/api/`` (the front door's too: ``errors_middleware``) has Ollama's shape,
``{"error": "message", "code": "..."}``, with the status the other APIs give it.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

from mlx_agent import __version__
from mlx_agent.api_errors import Code, ollama_body
from mlx_agent.files import utc_iso
from mlx_agent.gateway.door.http_errors import family_errors, json_response, refused
from mlx_agent.gateway.door.security import OLLAMA_PREFIX
from mlx_agent.gateway.models.lifecycle import Lifecycle
from mlx_agent.gateway.observe.request_log import exchange_of
from mlx_agent.gateway.ollama.bodies import Generation, OllamaChatBody, OllamaGenerateBody, OllamaShowBody
from mlx_agent.gateway.ollama.embed import OllamaEmbedApi
from mlx_agent.gateway.ollama.keep_alive import KeepAlive
from mlx_agent.gateway.ollama.models import ModelInfo, read_info
from mlx_agent.gateway.ollama.names import required_model, route_tagged
from mlx_agent.gateway.ollama.request import OllamaRequest, translate_chat, translate_generate
from mlx_agent.gateway.ollama.stream import NDJSON, OllamaStream, load_duration, reply
from mlx_agent.gateway.sse import Events, PumpResult
from mlx_agent.gateway.upstream import Upstream, read_error
from mlx_agent.load_memory import memory_estimate
from mlx_agent.worker_routes import WorkerRoute

OLLAMA_API_VERSION = "0.12.0"  # the Ollama API this front speaks (the fields of its 0.12 releases)
NEVER_CHANGED = (
    "this server never downloads, creates or changes models: it serves the models its reviewed serve plan names; "
    "preview and confirm a new plan (mlx-agent serve) to serve another"
)


class OllamaApi:
    """The handlers of the Ollama endpoints (their refusals: ``endpoints.Endpoint``, ``errors_middleware``)."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.fleet = upstream.fleet
        self.keep_alive = KeepAlive()
        self.embedder: OllamaEmbedApi = OllamaEmbedApi(upstream, self.keep_alive)
        self.infos: dict[str, ModelInfo] = {}

    # -- models -------------------------------------------------------------------------------------------

    def route(self, name: object) -> Lifecycle:
        """Return the model a request names (required); Ollama's ``:latest`` tag may follow a served name."""
        return route_tagged(self.fleet, required_model(name))

    async def info(self, model: Lifecycle) -> ModelInfo:
        """Return the model's details, read from its files once."""
        found = self.infos.get(model.name)
        if found is None:
            found = self.infos[model.name] = await asyncio.to_thread(read_info, model.model)
        return found

    async def tags(self, request: web.Request) -> web.Response:
        """Answer ``GET /api/tags``: every served model."""
        return json_response({"models": [(await self.info(m)).listing() for m in self.fleet.models]})

    async def show(self, request: web.Request, body: OllamaShowBody) -> web.Response:
        """Answer ``POST /api/show``: one model's details, template and capabilities."""
        model = self.route(body.model or body.name)
        return json_response((await self.info(model)).show())

    async def ps(self, request: web.Request) -> web.Response:
        """Answer ``GET /api/ps``: the loaded models, their memory, and when each is unloaded."""
        models = []
        for model in self.fleet.models:
            worker = model.worker
            if worker is None or model.state != "loaded":
                continue
            info = await self.info(model)
            size = worker_memory(worker.pid) or memory_estimate(model.model["weight_bytes"]) or info.size
            entry = info.listing()
            entry.pop("modified_at")
            entry.update(expires_at=self.keep_alive.expires_at(model), size=size, size_vram=size)
            entry["context_length"] = info.context_length
            models.append(entry)
        return json_response({"models": models})

    async def version(self, request: web.Request) -> web.Response:
        """Answer ``GET /api/version``."""
        return json_response({"version": OLLAMA_API_VERSION, "mlx_agent": __version__})

    async def refuse_change(self, request: web.Request) -> web.Response:
        """Answer pull, push, create, copy, delete and blobs: 501 ``model_management_unsupported``."""
        raise refused(Code.MODEL_MANAGEMENT_UNSUPPORTED, f"{request.path} is not served: {NEVER_CHANGED}")

    # -- generation ---------------------------------------------------------------------------------------

    async def chat(self, request: web.Request, body: OllamaChatBody) -> web.StreamResponse:
        """Answer ``POST /api/chat``, streamed (Ollama's default) or not."""
        model = self.route(body.model)
        translated = translate_chat(body)
        return await self._answer(request, "chat", model, body, translated)

    async def generate(self, request: web.Request, body: OllamaGenerateBody) -> web.StreamResponse:
        """Answer ``POST /api/generate``, streamed or not."""
        model = self.route(body.model)
        translated = translate_generate(body)
        return await self._answer(request, "generate", model, body, translated)

    async def _answer(
        self, request: web.Request, kind: str, model: Lifecycle, body: Generation, translated: OllamaRequest
    ) -> web.StreamResponse:
        exchange = exchange_of(request)
        arrived_ns = int(exchange.started * 1e9) if exchange is not None else time.perf_counter_ns()
        arrived = exchange.wall if exchange is not None else time.time()
        name = str(body.model)
        if translated.load_only:
            return await self._load(request, kind, model, name, translated)
        if body.think not in (None, False) and "thinking" not in (await self.info(model)).capabilities:
            # Ollama refuses it too: the client asked for reasoning this model's template cannot give
            raise refused(Code.MODEL_NOT_THINKING, f"{name!r} does not support thinking", param="think")
        chat = dict(translated.chat, model=model.name)
        _, prepared = self.upstream.prepare(request, chat)
        route = WorkerRoute.COMPLETIONS if translated.raw else WorkerRoute.CHAT  # a raw generate: no template
        if exchange is not None:
            exchange.stream = translated.stream  # the worker streams either way; the request line says the client's

        account = self.upstream.accountant(request, route, prepared.body)
        translator = OllamaStream(
            kind,
            name,
            arrived_ns=arrived_ns,
            load_ns=load_duration(model, arrived),
            on_usage=account,
            collect=not translated.stream,
        )
        try:
            if translated.stream:
                ndjson = {"Content-Type": NDJSON}
                return await self.upstream.stream(request, model, prepared, translator, route=route, headers=ndjson)
            return json_response(await self._collect(request, model, prepared.body, translator, route))
        finally:
            self.keep_alive.after(model, translated.keep_alive)

    async def _collect(
        self, request: web.Request, model: Lifecycle, body: dict[str, Any], translator: OllamaStream, route: WorkerRoute
    ) -> dict[str, Any]:
        """Read the worker's stream through ``translator`` and return the folded reply (module docstring)."""
        result = PumpResult()
        events = Events(translator, result, exchange_of(request))
        async with self.upstream.worker_request(model, body, route, stream=False) as (answer, worker):
            if answer.status != 200 or answer.content_type != "text/event-stream":
                try:
                    doc = json.loads(await answer.body())
                except (OSError, ValueError):
                    doc = None
                raise read_error(answer.status if answer.status != 200 else 502, doc)

            def sink(data: bytes) -> None:
                events.feed(data)  # a collecting translator keeps its lines and returns no bytes

            failure = await answer.pipe(sink)
            if not result.done and translator.error is None:
                await self.upstream.notice_exit(model, worker)
        if translator.error is not None:
            raise refused(Code.WORKER_FAILED, translator.error)
        if not result.done or not translator.kept:
            raise refused(Code.WORKER_FAILED, failure or "the model worker ended its answer before it was complete")
        return reply(translator.kept)

    async def _load(
        self, request: web.Request, kind: str, model: Lifecycle, name: str, translated: OllamaRequest
    ) -> web.StreamResponse:
        """Load the model (or unload it for ``keep_alive: 0``) and answer at once, as Ollama does for no prompt."""
        exchange = exchange_of(request)
        if exchange is not None:
            exchange.routed(model.name, translated.stream, None)
        if translated.keep_alive == 0 and self.keep_alive.after(model, 0):
            reason = "unload"
        else:
            model.request_started(False)
            try:
                await model.acquire()
            finally:
                model.request_finished(False)
            self.keep_alive.after(model, translated.keep_alive)
            reason = "load"
        answer: dict[str, Any] = {"model": name, "created_at": utc_iso(time.time())}
        answer.update({"message": {"role": "assistant", "content": ""}} if kind == "chat" else {"response": ""})
        answer.update(done=True, done_reason=reason)
        if not translated.stream:
            return json_response(answer)
        return web.Response(body=json.dumps(answer).encode() + b"\n", content_type=NDJSON)


def worker_memory(pid: int) -> int | None:
    """Return the resident memory of a worker and the processes it started (None if it cannot be read)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return int(sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


# Every error under ``/api/`` (the front door's too) in Ollama's shape.
errors_middleware = family_errors(OLLAMA_PREFIX, lambda doc: isinstance(doc.get("error"), dict), ollama_body)
