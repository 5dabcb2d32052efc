"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: the Anthropic Messages API over the worker.

Requests are translated (``anthropic_messages``), checked and clamped like chat completions, sent to the
worker's chat completions through the proxy (load on demand, open-request accounting, per-key
``cached_tokens``), and the reply translated back (``anthropic_reply``, ``anthropic_stream``).

``count_tokens`` counts with the model's own tokenizer and chat template, in the worker: the translated
request is sent as a chat completion with ``max_tokens: 1`` and the reply's ``usage.prompt_tokens`` is the
count (the model is loaded first if it is not). It is the prompt a ``/v1/messages`` request with the same
messages, system and tools would have, generation prompt included; that request reports it as
``input_tokens + cache_read_input_tokens``.

Every error on these paths, the front door's included (``errors_middleware``), has Anthropic's shape
(``api_errors.anthropic_body``).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web

from mlx_agent.api_errors import Code, anthropic_body
from mlx_agent.gateway.anthropic.bodies import MessagesBody, PromptBody
from mlx_agent.gateway.anthropic.reply import message_from_chat
from mlx_agent.gateway.anthropic.request import translate
from mlx_agent.gateway.anthropic.stream import AnthropicStream
from mlx_agent.gateway.door.http_errors import family_errors, json_response, refused
from mlx_agent.gateway.upstream import Upstream, dropped_tools
from mlx_agent.worker_routes import WorkerRoute

ANTHROPIC_PREFIX = "/v1/messages"  # every error under it, the front door's too, has Anthropic's shape


class AnthropicApi:
    """The handlers of the Anthropic Messages endpoints (their refusals: ``endpoints.Endpoint``)."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    async def messages(self, request: web.Request, body: MessagesBody) -> web.StreamResponse:
        """Create a message, streamed or not."""
        translated = translate(body)
        model, prepared = self.upstream.prepare(request, translated.chat)
        name = prepared.client_model
        headers = dropped_tools(translated.tools.dropped)
        if prepared.stream:
            account = self.upstream.accountant(request, WorkerRoute.CHAT, prepared.body)
            stream = AnthropicStream(name, on_usage=account, omit_thinking=translated.omit_thinking)
            return await self.upstream.stream(request, model, prepared, stream, headers=headers)
        doc = await self.upstream.complete(request, model, prepared)
        return json_response(message_from_chat(doc, name, omit_thinking=translated.omit_thinking), headers=headers)

    async def count_tokens(self, request: web.Request, body: PromptBody) -> web.Response:
        """Count the prompt's tokens with the model's own tokenizer and template (module docstring)."""
        chat = translate(body).chat
        chat.update(max_tokens=1, stream=False)
        model, prepared = self.upstream.prepare(request, chat)
        doc = await self.upstream.complete(request, model, prepared)
        usage = doc.get("usage")
        count = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
        if not isinstance(count, int) or isinstance(count, bool):
            raise refused(Code.WORKER_FAILED, "the model worker did not report the prompt's tokens")
        return json_response({"input_tokens": count})


# Every error on the Messages paths (the front door's too) in Anthropic's shape; one already in it is kept.
errors_middleware = family_errors(
    ANTHROPIC_PREFIX, lambda doc: doc.get("type") != "error" and "error" in doc, anthropic_body
)
