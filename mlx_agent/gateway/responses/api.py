"""``POST /v1/responses`` and the stored responses' paths: the OpenAI Responses API over the worker.

Requests are translated (``openai_responses``), checked and clamped like chat completions, sent to the
worker's chat completions through the proxy (load on demand, open-request accounting, per-key
``cached_tokens``), and the reply translated back (``responses_output``, ``responses_stream``). A
``background`` request is answered when it is complete, with ``status`` completed (or incomplete). Responses
are stored (``responses_store``) unless the request said ``store: false``. A request whose input holds a
``compaction_trigger`` is a compaction (``compact.py``), as is ``POST /v1/responses/compact``. A stored
response is read (``GET /v1/responses/{id}``), deleted (``DELETE``) and its input listed (``.../input_items``,
``items.py``) by the key that made it; to any other key it is an unknown id (404).
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from mlx_agent.api_errors import Code
from mlx_agent.gateway.door.http_errors import error_response, json_response, refused
from mlx_agent.gateway.door.security import API_KEY_ID
from mlx_agent.gateway.observe.limit_notice import with_granted_output
from mlx_agent.gateway.observe.request_log import exchange_of
from mlx_agent.gateway.responses.bodies import ResponsesBody
from mlx_agent.gateway.responses.compact import Compactor, is_trigger
from mlx_agent.gateway.responses.items import ItemsQuery, items_of, page
from mlx_agent.gateway.responses.output import base_response, conversation_of, new_id, response_from_chat
from mlx_agent.gateway.responses.request import ResponsesRequest, to_chat
from mlx_agent.gateway.responses.store import ResponseStore
from mlx_agent.gateway.responses.stream import ResponsesStream
from mlx_agent.gateway.upstream import Upstream, dropped_tools
from mlx_agent.worker_routes import WorkerRoute


class ResponsesApi:
    """The handlers of the Responses endpoints (their refusals: ``endpoints.Endpoint``)."""

    def __init__(self, upstream: Upstream, store: ResponseStore) -> None:
        self.upstream = upstream
        self.store = store
        self.compactor = Compactor(upstream, self._history)

    async def create(self, request: web.Request, body: ResponsesBody) -> web.StreamResponse:
        """Create a response, streamed or not."""
        owner: str | None = request.get(API_KEY_ID)
        history = self._history(body.previous_response_id, owner)
        if is_trigger(body):
            return await self.compactor.trigger(request, body, history)
        named = self.upstream.fleet.route(body.model)
        translated = to_chat(body, default_model=named.name, history=history)
        model, prepared = self.upstream.prepare(request, translated.chat)
        base = base_response(translated, new_id("resp"), int(time.time()))
        headers = dropped_tools(translated.tools.dropped)
        if translated.stream:

            def keep(final: dict[str, Any]) -> None:
                self._keep(translated, body, final, owner)

            account = self.upstream.accountant(request, WorkerRoute.CHAT, prepared.body)
            stream = ResponsesStream(base, keep, on_usage=account, tools=translated.tools)
            return await self.upstream.stream(request, model, prepared, stream, headers=headers)
        doc = await self.upstream.complete(request, model, prepared)
        response = with_granted_output(response_from_chat(doc, base, tools=translated.tools), exchange_of(request))
        self._keep(translated, body, response, owner)
        return json_response(response, headers=headers)

    async def input_tokens(self, request: web.Request, body: ResponsesBody) -> web.Response:
        """Count a Responses request's prompt tokens as the model would read it (as Anthropic's count_tokens).

        The request is translated as ``create`` translates it (``previous_response_id`` included) and sent as a
        chat completion with ``max_tokens: 1``; the reply's ``prompt_tokens`` is the count. Nothing is stored.
        """
        owner: str | None = request.get(API_KEY_ID)
        history = self._history(body.previous_response_id, owner)
        named = self.upstream.fleet.route(body.model)
        chat = to_chat(body, default_model=named.name, history=history).chat
        chat.update(max_tokens=1, stream=False)
        chat.pop("stream_options", None)
        model, prepared = self.upstream.prepare(request, chat)
        doc = await self.upstream.complete(request, model, prepared)
        usage = doc.get("usage")
        count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if not isinstance(count, int) or isinstance(count, bool):
            raise refused(Code.WORKER_FAILED, "the model worker did not report the prompt's tokens")
        return json_response({"object": "response.input_tokens", "input_tokens": count})

    async def cancel(self, request: web.Request) -> web.Response:
        """Answer a cancel: a stored response is always finished here, so it is returned as it is.

        The front stores a response once it is complete (a ``background`` one too: it is answered when done), so
        none is ever running to be cancelled; a running request is stopped by its client hanging up.
        """
        response_id = request.match_info["response_id"]
        found = self.store.get(response_id, request.get(API_KEY_ID))
        if found is None:
            return self._not_found(response_id)
        return json_response(found)

    async def compact(self, request: web.Request, body: ResponsesBody) -> web.Response:
        """``POST /v1/responses/compact`` (``compact.Compactor``)."""
        return await self.compactor.compact(request, body)

    def _history(self, previous: str | None, owner: str | None) -> list[dict[str, Any]] | None:
        """Return the stored conversation ``previous_response_id`` continues; 400 when none is stored."""
        if previous is None:
            return None
        conversation = self.store.conversation(previous, owner)
        if conversation is None:
            raise refused(
                Code.PREVIOUS_RESPONSE_NOT_FOUND,
                f"Previous response with id '{previous}' not found (the front keeps the "
                "most recent stored responses until it stops)",
                param="previous_response_id",
            )
        return conversation

    def _keep(
        self, translated: ResponsesRequest, body: ResponsesBody, response: dict[str, Any], owner: str | None
    ) -> None:
        if translated.store:
            self.store.put(response, owner, conversation_of(translated, response), items_of(body.input))

    async def retrieve(self, request: web.Request) -> web.Response:
        """Return a stored response."""
        response_id = request.match_info["response_id"]
        if request.query.get("stream") not in (None, "false"):
            return error_response(
                Code.UNSUPPORTED_PARAMETER,
                "replaying a stored response as a stream is not supported",
                param="stream",
            )
        found = self.store.get(response_id, request.get(API_KEY_ID))
        if found is None:
            return self._not_found(response_id)
        return json_response(found)

    async def delete(self, request: web.Request) -> web.Response:
        """Delete a stored response: ``{"id", "object": "response", "deleted": true}``."""
        response_id = request.match_info["response_id"]
        if not self.store.delete(response_id, request.get(API_KEY_ID)):
            return self._not_found(response_id)
        return json_response({"id": response_id, "object": "response", "deleted": True})

    async def input_items(self, request: web.Request) -> web.Response:
        """Return a page of the input items a stored response was made from (``items.page``)."""
        response_id = request.match_info["response_id"]
        query = ItemsQuery.parse(request.query)  # a refusal: the record answers it (endpoints.Route)
        items = self.store.input_items(response_id, request.get(API_KEY_ID))
        if items is None:
            return self._not_found(response_id)
        return json_response(page(items, query))

    def _not_found(self, response_id: str) -> web.Response:
        """Answer an id that is not stored here, or not for this key: 404 ``not_found`` either way."""
        return error_response(
            Code.NOT_FOUND,
            f"No response with id '{response_id}' is stored here (the gateway keeps "
            f"the most recent {self.store.capacity} until it stops)",
            param="response_id",
        )
