"""Every path the front answers, one record each, registered by one loop (``app.build_app``).

A ``Route`` is a path whose handler takes the request alone (listings, health, metrics, control). An
``Endpoint`` is a model API path with a body: the body is read and checked against its declaration (its
family's ``bodies.py``: its fields are the endpoint's whitelist and bounds) before the handler runs, and the
handler gets the parsed body. Any ``RequestRefused`` raised on the way is answered in the endpoint's API family's
shape (``api_errors``), with the retry advice every refusal gets (``http_errors``); one a ``Route``'s handler
raises (a bad query parameter) is answered too, in OpenAI's shape.

To add an endpoint: a declaration in its family's ``bodies.py``, a handler (and translator) in its family's package, one
row here, and its rows in docs/gateway.md (docs/contributing.md, "Add an endpoint").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from aiohttp import web

from mlx_agent.api_errors import Code, Family
from mlx_agent.bodies import Body, ChatBody, CompletionBody, TokenizeBody, load_json
from mlx_agent.errors import BodyInvalid, RequestRefused
from mlx_agent.gateway.anthropic.bodies import MessagesBody, PromptBody
from mlx_agent.gateway.door.connections import Handler
from mlx_agent.gateway.door.http_errors import parse, refusal_response, refused
from mlx_agent.gateway.ollama.bodies import (
    OllamaChatBody,
    OllamaEmbedBody,
    OllamaEmbeddingsBody,
    OllamaGenerateBody,
    OllamaShowBody,
)
from mlx_agent.gateway.openai.bodies import EmbeddingsBody, RerankBody
from mlx_agent.gateway.openai.media_bodies import ImageGenerationBody, SpeechBody
from mlx_agent.gateway.responses.bodies import ResponsesBody
from mlx_agent.wire import CONTROL_PREFIX

if TYPE_CHECKING:
    from mlx_agent.gateway.anthropic.api import AnthropicApi
    from mlx_agent.gateway.door.control import Control
    from mlx_agent.gateway.ollama.api import OllamaApi
    from mlx_agent.gateway.openai.cache_stats import CacheApi
    from mlx_agent.gateway.openai.embeddings import EmbeddingsApi
    from mlx_agent.gateway.openai.media import MediaApi
    from mlx_agent.gateway.openai.passthrough import OpenAiApi
    from mlx_agent.gateway.responses.api import ResponsesApi

B = TypeVar("B", bound=Body)
BodyHandler = Callable[[web.Request, B], Awaitable[web.StreamResponse]]


class Key(StrEnum):
    """The name of a front endpoint in code (the worker's routes are ``worker_routes.WorkerRoute``)."""

    ROOT = "root"
    HEALTH = "health"
    METRICS = "metrics"
    MODELS = "models"
    MODEL = "model"
    CHAT = "chat"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"
    RERANK = "rerank"
    TOKENIZE = "tokenize"
    MESSAGES = "messages"
    COUNT_TOKENS = "count_tokens"
    RESPONSES = "responses"
    COMPACT = "compact"
    RESPONSE = "response"
    DELETE_RESPONSE = "delete_response"
    INPUT_ITEMS = "input_items"
    OLLAMA_CHAT = "ollama_chat"
    OLLAMA_GENERATE = "ollama_generate"
    OLLAMA_TAGS = "ollama_tags"
    OLLAMA_SHOW = "ollama_show"
    OLLAMA_PS = "ollama_ps"
    OLLAMA_VERSION = "ollama_version"
    OLLAMA_EMBED = "ollama_embed"
    OLLAMA_EMBEDDINGS = "ollama_embeddings"
    OLLAMA_PULL = "ollama_pull"
    OLLAMA_PUSH = "ollama_push"
    OLLAMA_CREATE = "ollama_create"
    OLLAMA_COPY = "ollama_copy"
    OLLAMA_DELETE = "ollama_delete"
    OLLAMA_BLOB = "ollama_blob"
    OLLAMA_BLOB_UPLOAD = "ollama_blob_upload"
    SPEECH = "speech"
    TRANSCRIPTIONS = "transcriptions"
    TRANSLATIONS = "translations"
    IMAGE_GENERATIONS = "image_generations"
    IMAGE_EDITS = "image_edits"
    REALTIME = "realtime"
    CACHE_STATS = "cache_stats"
    CACHE_RESET = "cache_reset"
    INPUT_TOKENS = "input_tokens"
    CANCEL_RESPONSE = "cancel_response"
    CONTROL_STATUS = "control_status"
    CONTROL_UNLOAD = "control_unload"
    CONTROL_POLICY = "control_policy"


@dataclass(frozen=True)
class Apis:
    """The handler objects a front builds once its upstream exists (``app.build_app``'s lifespan)."""

    openai: OpenAiApi
    anthropic: AnthropicApi
    responses: ResponsesApi
    ollama: OllamaApi
    control: Control
    metrics: Handler
    embeddings: EmbeddingsApi
    media: MediaApi
    cache: CacheApi


async def read_body(request: web.Request, declaration: type[B]) -> B:
    """Return the request's JSON body parsed by ``declaration``; 400 ``invalid_json`` or the field's refusal."""
    raw = await request.read()
    try:
        doc = load_json(raw)
    except BodyInvalid as error:
        raise RequestRefused(400, error.message, code=error.code, param=error.param) from None
    return parse(declaration, doc)


@dataclass(frozen=True)
class Route:
    """A path whose handler takes the request alone; ``GET`` routes answer ``HEAD`` too."""

    key: Key
    method: str
    path: str
    handler: Callable[[Apis], Handler]

    def bind(self, apis: Apis) -> Handler:
        """Return the aiohttp handler of this route: a ``RequestRefused`` it raises is answered (OpenAI's shape)."""
        handle = self.handler(apis)

        async def serve(request: web.Request) -> web.StreamResponse:
            try:
                return await handle(request)
            except RequestRefused as refusal:
                return refusal_response(refusal)

        return serve


@dataclass(frozen=True)
class Endpoint(Generic[B]):
    """A model API path: ``body`` declares what it accepts, ``handler`` gets it parsed."""

    key: Key
    method: str
    path: str
    body: type[B]
    handler: Callable[[Apis], BodyHandler[B]]
    family: Family = Family.OPENAI

    def bind(self, apis: Apis) -> Handler:
        """Return the aiohttp handler: read and check the body, run the handler, answer refusals in shape."""
        handle = self.handler(apis)

        async def serve(request: web.Request) -> web.StreamResponse:
            try:
                return await handle(request, await read_body(request, self.body))
            except RequestRefused as refusal:
                return refusal_response(refusal, self.family)

        return serve


async def refuse_realtime(request: web.Request) -> web.StreamResponse:
    """Answer mlx-vlm's realtime voice WebSocket: 501, not served through the front (docs/gateway.md)."""
    raise refused(
        Code.REALTIME_UNSUPPORTED,
        "the realtime WebSocket (/v1/realtime) is not served: the front proxies no WebSocket with its keys, limits "
        "and request accounting yet; use POST /v1/audio/transcriptions and POST /v1/audio/speech",
    )


def _ollama_refusal(key: Key, method: str, path: str) -> Route:
    return Route(key, method, path, lambda apis: apis.ollama.refuse_change)


# Ollama's API (gateway/ollama/; its errors in Ollama's shape, the front door's too: ollama.api.errors_middleware).
OLLAMA_ENDPOINTS: tuple[Route | Endpoint[Any], ...] = (
    Endpoint(Key.OLLAMA_CHAT, "POST", "/api/chat", OllamaChatBody, lambda apis: apis.ollama.chat, Family.OLLAMA),
    Endpoint(
        Key.OLLAMA_GENERATE,
        "POST",
        "/api/generate",
        OllamaGenerateBody,
        lambda apis: apis.ollama.generate,
        Family.OLLAMA,
    ),
    Endpoint(Key.OLLAMA_SHOW, "POST", "/api/show", OllamaShowBody, lambda apis: apis.ollama.show, Family.OLLAMA),
    Endpoint(
        Key.OLLAMA_EMBED, "POST", "/api/embed", OllamaEmbedBody, lambda apis: apis.ollama.embedder.embed, Family.OLLAMA
    ),
    Endpoint(
        Key.OLLAMA_EMBEDDINGS,
        "POST",
        "/api/embeddings",
        OllamaEmbeddingsBody,
        lambda apis: apis.ollama.embedder.embeddings,
        Family.OLLAMA,
    ),
    Route(Key.OLLAMA_TAGS, "GET", "/api/tags", lambda apis: apis.ollama.tags),
    Route(Key.OLLAMA_PS, "GET", "/api/ps", lambda apis: apis.ollama.ps),
    Route(Key.OLLAMA_VERSION, "GET", "/api/version", lambda apis: apis.ollama.version),
    _ollama_refusal(Key.OLLAMA_PULL, "POST", "/api/pull"),
    _ollama_refusal(Key.OLLAMA_PUSH, "POST", "/api/push"),
    _ollama_refusal(Key.OLLAMA_CREATE, "POST", "/api/create"),
    _ollama_refusal(Key.OLLAMA_COPY, "POST", "/api/copy"),
    _ollama_refusal(Key.OLLAMA_DELETE, "DELETE", "/api/delete"),
    _ollama_refusal(Key.OLLAMA_BLOB_UPLOAD, "POST", "/api/blobs/{digest}"),
    _ollama_refusal(Key.OLLAMA_BLOB, "GET", "/api/blobs/{digest}"),  # and HEAD, which clients ask before an upload
)

# In this order: /v1/responses/compact and /v1/responses/input_tokens come before /v1/responses/{response_id},
# which would take them for an id (and answer 405).
ENDPOINTS: tuple[Route | Endpoint[Any], ...] = (
    Route(Key.ROOT, "GET", "/", lambda apis: apis.openai.root),
    Route(Key.HEALTH, "GET", "/health", lambda apis: apis.openai.health),
    Route(Key.METRICS, "GET", "/metrics", lambda apis: apis.metrics),
    Route(Key.MODELS, "GET", "/v1/models", lambda apis: apis.openai.models),
    Route(Key.MODEL, "GET", "/v1/models/{model_id:.+}", lambda apis: apis.openai.model),
    Endpoint(Key.CHAT, "POST", "/v1/chat/completions", ChatBody, lambda apis: apis.openai.chat),
    Endpoint(Key.COMPLETIONS, "POST", "/v1/completions", CompletionBody, lambda apis: apis.openai.completions),
    Endpoint(Key.EMBEDDINGS, "POST", "/v1/embeddings", EmbeddingsBody, lambda apis: apis.embeddings.create),
    Endpoint(Key.RERANK, "POST", "/v1/rerank", RerankBody, lambda apis: apis.embeddings.rerank),
    Endpoint(Key.TOKENIZE, "POST", "/v1/tokenize", TokenizeBody, lambda apis: apis.openai.tokenize),
    Endpoint(
        Key.MESSAGES, "POST", "/v1/messages", MessagesBody, lambda apis: apis.anthropic.messages, Family.ANTHROPIC
    ),
    Endpoint(
        Key.COUNT_TOKENS,
        "POST",
        "/v1/messages/count_tokens",
        PromptBody,
        lambda apis: apis.anthropic.count_tokens,
        Family.ANTHROPIC,
    ),
    Endpoint(Key.RESPONSES, "POST", "/v1/responses", ResponsesBody, lambda apis: apis.responses.create),
    Endpoint(Key.COMPACT, "POST", "/v1/responses/compact", ResponsesBody, lambda apis: apis.responses.compact),
    Endpoint(
        Key.INPUT_TOKENS, "POST", "/v1/responses/input_tokens", ResponsesBody, lambda apis: apis.responses.input_tokens
    ),
    Route(Key.RESPONSE, "GET", "/v1/responses/{response_id}", lambda apis: apis.responses.retrieve),
    Route(Key.DELETE_RESPONSE, "DELETE", "/v1/responses/{response_id}", lambda apis: apis.responses.delete),
    Route(Key.INPUT_ITEMS, "GET", "/v1/responses/{response_id}/input_items", lambda apis: apis.responses.input_items),
    Route(Key.CANCEL_RESPONSE, "POST", "/v1/responses/{response_id}/cancel", lambda apis: apis.responses.cancel),
    # mlx-vlm's media endpoints (openai/media.py): the audio uploads and edits are forms, read by their handlers.
    Endpoint(Key.SPEECH, "POST", "/v1/audio/speech", SpeechBody, lambda apis: apis.media.speech),
    Route(Key.TRANSCRIPTIONS, "POST", "/v1/audio/transcriptions", lambda apis: apis.media.transcriptions),
    Route(Key.TRANSLATIONS, "POST", "/v1/audio/translations", lambda apis: apis.media.translations),
    Endpoint(
        Key.IMAGE_GENERATIONS,
        "POST",
        "/v1/images/generations",
        ImageGenerationBody,
        lambda apis: apis.media.generations,
    ),
    Route(Key.IMAGE_EDITS, "POST", "/v1/images/edits", lambda apis: apis.media.edits),
    Route(Key.REALTIME, "GET", "/v1/realtime", lambda apis: refuse_realtime),
    Route(Key.CACHE_STATS, "GET", "/v1/cache/stats", lambda apis: apis.cache.stats),
    Route(Key.CACHE_RESET, "POST", "/v1/cache/reset", lambda apis: apis.cache.reset),  # control token: security
    *OLLAMA_ENDPOINTS,
    Route(Key.CONTROL_STATUS, "GET", CONTROL_PREFIX + "status", lambda apis: apis.control.status),
    Route(Key.CONTROL_UNLOAD, "POST", CONTROL_PREFIX + "unload", lambda apis: apis.control.unload),
    Route(Key.CONTROL_POLICY, "PUT", CONTROL_PREFIX + "policy", lambda apis: apis.control.policy),
)
