"""The one road from an endpoint to a model's worker: routing, load on demand, open-request accounting, replies.

Every endpoint, whatever API it speaks, reaches a worker through ``Upstream``:

* ``route`` picks the model the request names (``Fleet.route``);

* ``worker_request`` counts the request as open (so unload and idle unload wait for it) from before the
  load until its reply has been read, loads the worker if needed, and posts the body (``worker_stream``: the
  reply is read by callbacks rather than aiohttp's client, since every streamed token passes through it);
* ``complete`` returns the worker's JSON reply, or raises ``RequestRefused`` carrying the worker's error;
* ``stream`` pumps the worker's stream through the endpoint's translator (``sse.pump``), the client's head
  sent early when the worker is slow to begin (``sse.ClientStream``);
* ``accountant`` returns what sees each reply's usage: the request's ``observe.Exchange``, and the per-API-key
  ``cached_tokens`` bound (``cache_privacy``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mlx_agent.api_errors import TYPE_INVALID_REQUEST, TYPE_SERVER, Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.cache_privacy import PromptLedger, PromptShape
from mlx_agent.gateway.cache_tenant import tenant_headers
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.door.security import API_KEY_ID
from mlx_agent.gateway.images import check_decoded
from mlx_agent.gateway.models.disk_check import disk_full
from mlx_agent.gateway.models.fleet import Fleet
from mlx_agent.gateway.models.lifecycle import Lifecycle
from mlx_agent.gateway.models.queue import served_alone
from mlx_agent.gateway.models.request_memory import estimate
from mlx_agent.gateway.models.worker import WorkerProcess
from mlx_agent.gateway.models.worker_stream import JSON, WorkerReply, open_reply
from mlx_agent.gateway.observe.limit_notice import lowered_headers, worker_granted
from mlx_agent.gateway.observe.request_log import current_exchange, exchange_of
from mlx_agent.gateway.request import PreparedRequest, prepare
from mlx_agent.gateway.sse import Accountant, ClientStream, StreamTranslator, end, pump
from mlx_agent.gateway.tools import DROPPED_HEADER
from mlx_agent.load_memory import available_memory
from mlx_agent.worker_routes import BodyKind, WorkerRoute

log = logging.getLogger("mlx_agent.gateway")
MEDIA_BODIES = (BodyKind.SPEECH, BodyKind.AUDIO, BodyKind.IMAGE_PROMPT, BodyKind.IMAGE_EDIT)
EXIT_NOTICE_S = 1.0
MAX_DETAIL = 300  # characters of a worker's own error message a client is shown


@dataclass(frozen=True)
class Raw:
    """A body sent to a worker as it is (a form), with its content type."""

    data: bytes
    content_type: str


def dropped_tools(names: list[str]) -> dict[str, str]:
    """Return the header naming tools left out of what the model sees (they run on a provider's servers)."""
    if not names:
        return {}
    log.info("left out tools this machine cannot run: %s", ", ".join(names))
    return {DROPPED_HEADER: ", ".join(names)}


def read_error(status: int, doc: object) -> RequestRefused:
    """Return the refusal that carries a worker's error reply (status, message, type, code, param)."""
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or f"the model worker answered {status}")
        type_ = str(error.get("type") or (TYPE_INVALID_REQUEST if status < 500 else TYPE_SERVER))
        code = str(error.get("code") or Code.WORKER_ERROR)
        param = error.get("param") if isinstance(error.get("param"), str) else None
        return RequestRefused(status, message, code=code, type_=type_, param=param)
    message = error if isinstance(error, str) else _detail(doc) or f"the model worker answered {status}"
    return RequestRefused(
        status, message, code=Code.WORKER_ERROR, type_=TYPE_INVALID_REQUEST if status < 500 else TYPE_SERVER
    )


def _detail(doc: object) -> str | None:
    """Return the message of a FastAPI error (mlx-vlm's ``{"detail": ...}``), never the input it may echo back."""
    detail = doc.get("detail") if isinstance(doc, dict) else None
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):  # a validation error: its first field
        first = detail[0]
        where = ".".join(str(part) for part in first.get("loc") or [] if part != "body")
        detail = f"{where}: {first.get('msg')}" if where else first.get("msg")
    return f"the model worker refused the request: {detail[:MAX_DETAIL]}" if isinstance(detail, str) else None


def check_memory(model: Lifecycle, body: dict[str, Any], reserve_gb: float | None) -> None:
    """Refuse (503 ``insufficient_memory``) a request whose KV cache would not fit; count the refusal on ``model``."""
    if reserve_gb is None or model.kv_shape is None:
        return
    found = estimate(
        model.kv_shape,
        body,
        context_window=model.model["context_window"],
        kv_cache=model.model.get("kv_cache"),
        reserve_gb=reserve_gb,
        available_bytes=available_memory(),
    )
    if found is not None and not found.fits:
        model.memory_refusals += 1
        raise found.refusal(model.name)


class Upstream:
    """Sends request bodies to the models' workers through their lifecycles' accounting."""

    def __init__(self, fleet: Fleet, ledger: PromptLedger | None) -> None:
        self.fleet = fleet
        self.ledger = ledger  # only when API keys are in use

    def prepare(self, request: web.Request, body: dict[str, Any]) -> tuple[Lifecycle, PreparedRequest]:
        """Route a body to its model and prepare it for that model's worker (``openai.request.prepare``).

        A stream is always asked for its usage chunk (the request line and the metrics count its tokens); the
        chunk is removed again when the client did not ask for it.
        """
        model = self.fleet.route(body.get("model"))
        prepared = prepare(body, model=model.model, force_usage=True)
        exchange = exchange_of(request)
        if exchange is not None:
            exchange.routed(model.name, prepared.stream, prepared.body.get("messages", prepared.body.get("prompt")))
            exchange.limits(prepared.requested_max_tokens, prepared.body.get("max_tokens"))
        return model, prepared

    @contextlib.asynccontextmanager
    async def worker_request(
        self,
        model: Lifecycle,
        body: dict[str, Any],
        route: WorkerRoute,
        *,
        stream: bool,
        raw: Raw | None = None,
    ) -> AsyncIterator[tuple[WorkerReply, WorkerProcess]]:
        """Send ``body`` to the worker on ``route`` (loading it first if needed); hold the reply open while read.

        ``raw`` is sent instead of ``body``'s JSON when the worker takes another kind of body (a form: the
        audio endpoints); ``body`` then holds its fields, for the checks and the accounting. A media request
        (``raw``, or a media route) is served alone, as mlx-vlm serves one generation at a time.

        A non-streamed request's images are first decoded whole (``images.check_decoded``: 400 ``image_invalid``).
        The request counts as open (``stream`` says which kind) from before the load until the block ends, and
        waits in the model's queue for a ready worker and a slot in it (``queue``), after its memory check
        (``request_memory``). A full queue (503 ``queue_full``), a request that cannot fit (503
        ``insufficient_memory``), a refused or failed load, and a worker that does not answer (502
        ``worker_failed``, or 503 ``worker_wedged`` when the front ended a stalled worker) raise ``RequestRefused``.
        """
        if not stream:  # a stream's images were decoded before its early head could go out (``stream``)
            await check_decoded(body)
        model.request_started(stream)
        try:
            check_memory(model, body, self.fleet.min_headroom_gb)
            media = raw is not None or route.kind in MEDIA_BODIES
            alone = media or served_alone(body, model.model.get("greedy_alone", False))
            async with model.admitted(alone, stream) as worker:
                try:
                    sent = raw if raw is not None else Raw(json.dumps(body).encode(), JSON)
                    # the front names the prefix cache's tenant; a client's own headers never reach a worker
                    headers = {**worker.session.headers, **tenant_headers()}
                    reply = await open_reply(worker.endpoint, route.path, sent.data, headers, sent.content_type)
                except OSError as exc:
                    await self.notice_exit(model, worker)
                    raise model.worker_failure(worker, f"the model worker did not answer: {exc}") from exc
                worker_granted(current_exchange(), reply.headers)
                model.stall.watch(reply)
                try:
                    yield reply, worker
                finally:
                    model.stall.unwatch(reply)
                    reply.close()
        finally:
            model.request_finished(stream)

    async def notice_exit(self, model: Lifecycle, worker: WorkerProcess) -> None:
        """Give a worker that just hung up a moment to be seen exiting, so the next request loads afresh.

        A worker that hung up while its disk is full did so for that reason (its log cannot grow): this raises
        503 ``disk_full`` (``disk_check``) for the caller's 502 ``worker_failed``.
        """
        deadline = time.monotonic() + EXIT_NOTICE_S
        while worker.exited() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        model.check_worker()
        if (full := disk_full(model)) is not None:
            raise full

    async def read_body(self, model: Lifecycle, worker: WorkerProcess, reply: WorkerReply) -> bytes:
        """Return a non-streamed reply's whole body; a worker that breaks it off is 502 ``worker_failed``."""
        try:
            return await reply.body()
        except OSError as exc:
            await self.notice_exit(model, worker)
            raise model.worker_failure(worker, f"the model worker failed while answering: {exc}") from exc

    def accountant(self, request: web.Request, route: WorkerRoute, body: dict[str, Any]) -> Accountant:
        """Return what sees a reply's usage: the request's exchange, and the ``cached_tokens`` bound of its key."""
        key_id: str | None = request.get(API_KEY_ID)
        ledger = self.ledger if key_id is not None else None
        shape = PromptShape.of(route, body) if ledger is not None else None
        exchange = exchange_of(request)

        def account(doc: dict[str, Any]) -> None:
            if exchange is not None:
                exchange.unparsed(doc, "message")  # a whole reply's (a stream's chunks are counted as they pass)
            usage = doc.get("usage")
            if not isinstance(usage, dict):
                return
            if exchange is not None:
                exchange.usage(usage)  # the worker's own count: the metrics are the operator's, not a client's
            if ledger is not None and key_id is not None and shape is not None:
                ledger.rewrite_usage(key_id, shape, usage)

        return account

    async def worker_json(self, model: Lifecycle, body: dict[str, Any], route: WorkerRoute) -> Any:
        """Return the worker's parsed (non-streamed) 200 reply to ``body`` on ``route``; its error as a refusal."""
        async with self.worker_request(model, body, route, stream=False) as (reply, worker):
            raw = await self.read_body(model, worker, reply)
            status = reply.status
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if status != 200:
            raise read_error(status, doc)
        return doc

    async def complete(
        self, request: web.Request, model: Lifecycle, prepared: PreparedRequest, route: WorkerRoute = WorkerRoute.CHAT
    ) -> dict[str, Any]:
        """Return the worker's (non-streamed) reply, its usage held to what the caller's key may see."""
        account = self.accountant(request, route, prepared.body)
        doc = await self.worker_json(model, prepared.body, route)
        if not isinstance(doc, dict) or not isinstance(doc.get("choices"), list) or not doc["choices"]:
            raise refused(Code.WORKER_FAILED, "the model worker's reply has no choices")
        account(doc)
        return doc

    async def stream(
        self,
        request: web.Request,
        model: Lifecycle,
        prepared: PreparedRequest,
        translator: StreamTranslator,
        route: WorkerRoute = WorkerRoute.CHAT,
        headers: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        """Stream the worker's answer through ``translator``.

        The client's head goes out when the worker's answer begins, or earlier if that takes a while
        (``sse.ClientStream``); a refusal before the head is an HTTP error, after it the stream's error event.
        """
        await check_decoded(prepared.body)  # 400 image_invalid, before the client's head may go out early
        client = ClientStream(request, translator, headers or {})
        try:
            async with self.worker_request(model, prepared.body, route, stream=True) as (reply, worker):
                if reply.status != 200 or reply.content_type != "text/event-stream":
                    try:
                        doc = json.loads(await reply.body())
                    except (OSError, ValueError):
                        doc = None
                    raise read_error(reply.status if reply.status != 200 else 502, doc)
                exchange = exchange_of(request)
                told = getattr(translator, "limit_lowered", None)  # the translators with a place for it (Responses)
                if told is not None and exchange is not None and exchange.limit_lowered:
                    told(exchange.max_tokens)
                response = await client.open(lowered_headers(exchange))
                if client.result.client_gone:
                    return response
                result = await pump(client, reply)
                if not result.done and not result.client_gone:
                    await self.notice_exit(model, worker)
                await end(response, translator, result)
                return response
        except RequestRefused as refusal:
            client.settle()
            if not client.opened:
                raise
            log.info("refused a stream after its head was sent: %s", refusal.message)
            return await client.fail(refusal.message)
        finally:
            client.close()
