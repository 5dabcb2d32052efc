"""Ollama's ``/api/embed`` and the older ``/api/embeddings``, over the embedding model behind ``/v1/embeddings``.

Both go through ``gateway.embeddings`` (``embedding_model``, ``embed``): ``model`` is required (400
``missing_parameter``) and may carry Ollama's ``:latest`` tag (``names``), only a model whose worker embeds
answers (a chat model is 400 ``model_not_embedding``), the inputs are checked the same way, and the worker's
vectors are returned as it wrote them. ``/api/embed`` takes ``input`` (a string or a list of strings) and
``dimensions``, and answers ``embeddings`` (one vector per input), ``prompt_eval_count`` (the tokens read) and
the durations in nanoseconds (``total_duration``, ``load_duration``) measured by the front; ``/api/embeddings``
takes one ``prompt`` and answers ``embedding``. ``truncate`` is accepted: an input longer than the model's window
is refused by the worker (400) rather than cut, whatever it says. ``options`` are accepted and change nothing (no
sampler runs); ``keep_alive`` applies as on chat.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from mlx_agent.gateway.door.http_errors import json_response
from mlx_agent.gateway.observe.request_log import exchange_of
from mlx_agent.gateway.ollama.bodies import OllamaEmbedBody, OllamaEmbeddingsBody
from mlx_agent.gateway.ollama.keep_alive import KeepAlive
from mlx_agent.gateway.ollama.names import required_model
from mlx_agent.gateway.ollama.request import parse_keep_alive
from mlx_agent.gateway.ollama.stream import load_duration
from mlx_agent.gateway.openai.embeddings import embed, embedding_model, inputs_of
from mlx_agent.gateway.upstream import Upstream


class OllamaEmbedApi:
    """The handlers of Ollama's two embeddings endpoints."""

    def __init__(self, upstream: Upstream, keep_alive: KeepAlive) -> None:
        self.upstream = upstream
        self.keep_alive = keep_alive

    async def _vectors(
        self, request: web.Request, name: object, value: object, param: str, dimensions: int | None, keep: object
    ) -> tuple[list[list[float]], dict[str, Any]]:
        exchange = exchange_of(request)
        arrived_ns = int(exchange.started * 1e9) if exchange is not None else time.perf_counter_ns()
        arrived = exchange.wall if exchange is not None else time.time()
        seconds = parse_keep_alive(keep)
        model = embedding_model(self.upstream.fleet, required_model(name))
        inputs = inputs_of(value, param)
        if exchange is not None:
            exchange.routed(model.name, False, inputs)
        try:
            found = await embed(self.upstream, model, inputs, dimensions=dimensions)
        finally:
            self.keep_alive.after(model, seconds)
        if exchange is not None:
            exchange.usage({"prompt_tokens": found.prompt_tokens, "completion_tokens": 0})
        timing = {
            "total_duration": time.perf_counter_ns() - arrived_ns,
            "load_duration": load_duration(model, arrived)(),
            "prompt_eval_count": found.prompt_tokens,
        }
        return found.vectors, timing

    async def embed(self, request: web.Request, body: OllamaEmbedBody) -> web.Response:
        """Answer ``POST /api/embed``: one vector per input."""
        vectors, timing = await self._vectors(
            request, body.model, body.input, "input", body.dimensions, body.keep_alive
        )
        return json_response({"model": body.model, "embeddings": vectors, **timing})

    async def embeddings(self, request: web.Request, body: OllamaEmbeddingsBody) -> web.Response:
        """Answer ``POST /api/embeddings``: the prompt's vector."""
        vectors, _ = await self._vectors(request, body.model, body.prompt, "prompt", None, body.keep_alive)
        return json_response({"embedding": vectors[0]})
