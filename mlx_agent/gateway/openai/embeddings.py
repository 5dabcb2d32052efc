"""``POST /v1/embeddings`` over an embedding model's worker, and ``embed``, the one call every embeddings API makes.

The request is OpenAI's: ``input`` a string, a list of strings, a token-id list or a list of them (at most
``MAX_INPUTS``, none empty); ``encoding_format`` ``float`` (the default) or ``base64`` (little-endian float32,
as OpenAI's); ``dimensions`` where the model was trained for shorter vectors (the worker truncates and
renormalises, or refuses: ``runtime/entries/mlx_vlm_embed.py``); ``user`` accepted. The reply has ``data``
(one ``embedding`` per input, in order), ``model`` as the client named it, and ``usage`` (``prompt_tokens`` =
``total_tokens``, the tokens read).

Only a model whose worker embeds (``WorkerRecord.kind`` ``embedding``) answers; a chat model is 400
``model_not_embedding`` naming it. The request takes the road of every other (``Upstream.worker_request``):
load on demand, open-request accounting, the request line. Another API's embeddings (Ollama's ``/api/embed``)
call ``embedding_model`` and ``embed`` and shape the reply their way.

``POST /v1/rerank`` is read (Cohere's and Jina's body) and routed, and every model refuses it with 400
``model_not_reranker`` naming it: its scores need a cross-encoder or a reranker checkpoint, which no runtime
here serves, and an embedding model's vectors are not them (docs/decisions.md). The message says how to rank
with ``/v1/embeddings`` instead.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import json_response, refused
from mlx_agent.gateway.model_kinds import NAMES, kind_of
from mlx_agent.gateway.models.fleet import Fleet
from mlx_agent.gateway.models.lifecycle import Lifecycle
from mlx_agent.gateway.observe.request_log import exchange_of
from mlx_agent.gateway.ollama.names import route_tagged
from mlx_agent.gateway.openai.bodies import EmbeddingsBody, RerankBody
from mlx_agent.gateway.upstream import Upstream
from mlx_agent.wire import WORKER_MODEL_NAME
from mlx_agent.worker_routes import WorkerRoute

MAX_INPUTS = 2048  # OpenAI's bound on one request's inputs

Inputs = list[str] | list[list[int]]


@dataclass(frozen=True)
class Embedded:
    """What a worker returned: one vector per input, in order, and the tokens it read."""

    vectors: list[list[float]]
    prompt_tokens: int


def embedding_model(fleet: Fleet, name: object) -> Lifecycle:
    """Return the model a request names when it embeds; 400 ``model_not_embedding`` for a chat model.

    ``NAME:latest`` names ``NAME`` here, as on Ollama's endpoints (``ollama.names``): Ollama's embedding clients
    send the tag on ``/v1/embeddings`` as well.
    """
    model = route_tagged(fleet, name)
    if model.model["worker"].get("kind") != "embedding":
        embedders = [m.name for m in fleet.models if m.model["worker"].get("kind") == "embedding"]
        hint = f"name an embedding model: {', '.join(embedders)}" if embedders else "serve an embedding model"
        raise refused(
            Code.MODEL_NOT_EMBEDDING,
            f"the model '{model.name}' is {NAMES.get(kind_of(model.model), NAMES[None])} and cannot embed; {hint} "
            "(--runtime mlx-vlm-embed)",
            param="model",
        )
    return model


def refuse_rerank(fleet: Fleet, name: object) -> RequestRefused:
    """Return the 400 ``model_not_reranker`` of the model a rerank request names (404 for an unknown name)."""
    model = fleet.route(name)
    kind = "an embedding model" if model.model["worker"].get("kind") == "embedding" else "a chat model"
    return refused(
        Code.MODEL_NOT_RERANKER,
        f"the model '{model.name}' is {kind} and cannot rerank: relevance scores need a reranker (a cross-encoder), "
        "which this server does not serve; embed the query and the documents with POST /v1/embeddings and rank "
        "the documents by the cosine similarity of their vectors to the query's",
        param="model",
    )


def inputs_of(value: object, param: str = "input") -> Inputs:
    """Return a request's inputs as a list of strings or of token-id lists; 400 naming the first bad one."""
    if isinstance(value, str) or (isinstance(value, list) and value and _is_int(value[0])):
        value = [value]
    if not isinstance(value, list) or not value:
        raise refused(
            Code.INVALID_VALUE, f"'{param}' must be a string, a list of strings or token-id lists", param=param
        )
    if len(value) > MAX_INPUTS:
        raise refused(Code.INVALID_VALUE, f"'{param}' may hold at most {MAX_INPUTS} inputs", param=param)
    texts = isinstance(value[0], str)
    for index, item in enumerate(value):
        where = f"{param}.{index}"
        if texts and not isinstance(item, str):
            raise refused(Code.INVALID_TYPE, "every input must be a string, as the first is", param=where)
        if not texts and not (isinstance(item, list) and all(_is_int(t) and t >= 0 for t in item)):
            raise refused(Code.INVALID_TYPE, "every input must be a list of token ids (integers >= 0)", param=where)
        if not item:
            raise refused(Code.INVALID_VALUE, "an input must not be empty", param=where)
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def floats(encoded: str) -> list[float]:
    """Return the vector of OpenAI's base64 encoding (little-endian float32)."""
    raw = base64.b64decode(encoded)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def as_base64(vector: list[float]) -> str:
    """Return a vector in OpenAI's base64 encoding (its float32 values, exact: they came as float32)."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


async def worker_embeddings(
    upstream: Upstream, model: Lifecycle, inputs: Sequence[str] | Sequence[Sequence[int]], dimensions: int | None
) -> tuple[list[list[float]], int]:
    """Return each input's vector, in order, and the tokens the worker read (it answers in base64: compact, exact)."""
    body: dict[str, Any] = {
        "model": model.model["worker"]["model_name"],
        "input": [i if isinstance(i, str) else list(i) for i in inputs],
        "encoding_format": "base64",
    }
    if dimensions is not None:
        body["dimensions"] = dimensions
    doc = await upstream.worker_json(model, body, WorkerRoute.EMBEDDINGS)
    data = doc.get("data") if isinstance(doc, dict) else None
    usage = doc.get("usage") if isinstance(doc, dict) else None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if not isinstance(data, list) or len(data) != len(inputs) or not _is_int(tokens):
        raise refused(Code.WORKER_FAILED, "the model worker's embeddings reply is malformed")
    ordered = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
    vectors = [d.get("embedding") if isinstance(d, dict) else None for d in ordered]
    if not all(isinstance(v, str) for v in vectors):
        raise refused(Code.WORKER_FAILED, "the model worker's embeddings reply is malformed")
    return [floats(str(v)) for v in vectors], int(str(tokens))


async def embed(
    upstream: Upstream,
    model: Lifecycle,
    inputs: Sequence[str] | Sequence[Sequence[int]],
    *,
    dimensions: int | None = None,
) -> Embedded:
    """Return the vectors of ``inputs`` from ``model``'s worker (loaded if needed) and the tokens it read.

    ``model`` comes from ``embedding_model``; ``inputs`` from ``inputs_of`` (or are checked the same way).
    A worker's refusal (an input past the window, a ``dimensions`` the model cannot give) is raised as
    ``RequestRefused`` carrying its code.
    """
    vectors, tokens = await worker_embeddings(upstream, model, inputs, dimensions)
    return Embedded(vectors, tokens)


class EmbeddingsApi:
    """The handler of ``POST /v1/embeddings`` (its refusals: ``endpoints.Endpoint``)."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    async def create(self, request: web.Request, body: EmbeddingsBody) -> web.Response:
        """Embed the request's inputs."""
        model = embedding_model(self.upstream.fleet, body.model)
        inputs = inputs_of(body.input)
        exchange = exchange_of(request)
        if exchange is not None:
            exchange.routed(model.name, False, inputs)
        result = await embed(self.upstream, model, inputs, dimensions=body.dimensions)
        tokens = result.prompt_tokens
        if exchange is not None:
            exchange.usage({"prompt_tokens": tokens, "completion_tokens": 0})
        base64_wanted = body.encoding_format == "base64"
        data = [
            {"object": "embedding", "index": index, "embedding": as_base64(vector) if base64_wanted else vector}
            for index, vector in enumerate(result.vectors)
        ]
        named = body.model if body.model and body.model != WORKER_MODEL_NAME else model.name
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return json_response({"object": "list", "data": data, "model": named, "usage": usage})

    async def rerank(self, request: web.Request, body: RerankBody) -> web.Response:
        """Refuse a rerank request naming its model (``refuse_rerank``)."""
        raise refuse_rerank(self.upstream.fleet, body.model)
