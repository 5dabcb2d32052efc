"""The HTTP API's error codes, each with its status and type, and the one builder of an error body per API family.

Standard library only and no import from ``mlx_agent``: the front (``gateway/``), the wrapped worker
(``runtime/``) and the native entry, which runs by path under another environment's interpreter (Python 3.9
or later) with no ``mlx_agent`` installed, all build their error answers here. So the module keeps to syntax
that interpreter reads (``str``-mixed ``Enum``, not ``StrEnum``).

Three families share the codes and differ in shape:

* ``openai``: ``{"error": {"message", "type", "param", "code", ...}}``, answered by chat and text completions,
  the Responses API, the listings, the control endpoints and every worker;
* ``anthropic``: ``{"type": "error", "error": {"type", "message", "code", "param", ...}}`` on the Messages
  paths, its ``type`` following the status as Anthropic's does (``anthropic_type``) and null fields left out.
* ``ollama``: ``{"error": "message", "code", "param"}`` on the Ollama paths (``/api/...``): Ollama's clients read
  the string ``error``; the code (and param, when there is one) ride beside it (``ollama_body``).

A code is stable and snake_case; docs/gateway.md and docs/wrapped-server.md list when each is answered. A
code that also names an ``mlx_agent.errors`` class (``unload_blocked``, ``adapter_changed``, ...) is spelled
the same here; tests/unit/test_api_errors.py holds the two together.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

# OpenAI's error types. TYPE_ keeps them apart from Code's members: in its body a bare NOT_FOUND is the member.
TYPE_INVALID_REQUEST = "invalid_request_error"
TYPE_AUTHENTICATION = "authentication_error"
TYPE_PERMISSION = "permission_error"
TYPE_NOT_FOUND = "not_found_error"
TYPE_CONFLICT = "conflict_error"
TYPE_SERVER = "server_error"


# Anthropic's error type by status; any other status below 500 is invalid_request_error, from 500 api_error.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class Family(str, Enum):  # noqa: UP042 (StrEnum is 3.11+: the native entry may run under 3.9)
    """The shape an API answers its errors in."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    OLLAMA = "ollama"


class Code(str, Enum):  # noqa: UP042 (as Family)
    """An API error code, with the HTTP status and the OpenAI ``type`` it is answered with.

    A member is its code string (``Code.WORKER_FAILED == "worker_failed"``; ``str()`` and JSON give the code).
    The status is the usual one: a few codes carry another where the answer says so (``bad_request`` takes
    aiohttp's status, ``worker_error`` the worker's).
    """

    status: int
    kind: str

    def __new__(cls, value: str, status: int, kind: str) -> Code:
        """Make a member from its ``(code, status, kind)`` row."""
        member = str.__new__(cls, value)
        member._value_ = value
        member.status = status
        member.kind = kind
        return member

    def __str__(self) -> str:
        """Return the code (a ``str``-mixed ``Enum`` would give ``Code.NAME``)."""
        return str(self.value)

    def __format__(self, spec: str) -> str:
        """Format the code, as ``str`` would."""
        return format(str(self.value), spec)

    # 400: the request's own fault
    INVALID_VALUE = "invalid_value", 400, TYPE_INVALID_REQUEST
    INVALID_TYPE = "invalid_type", 400, TYPE_INVALID_REQUEST
    MISSING_PARAMETER = "missing_parameter", 400, TYPE_INVALID_REQUEST
    INVALID_JSON = "invalid_json", 400, TYPE_INVALID_REQUEST
    INVALID_ENCODING = "invalid_encoding", 400, TYPE_INVALID_REQUEST
    INVALID_BODY = "invalid_body", 400, TYPE_INVALID_REQUEST
    UNSUPPORTED_PARAMETER = "unsupported_parameter", 400, TYPE_INVALID_REQUEST
    UNSUPPORTED_CONTENT = "unsupported_content", 400, TYPE_INVALID_REQUEST
    UNSUPPORTED_TOOL = "unsupported_tool", 400, TYPE_INVALID_REQUEST
    UNSUPPORTED_TOOL_CHOICE = "unsupported_tool_choice", 400, TYPE_INVALID_REQUEST
    PREVIOUS_RESPONSE_NOT_FOUND = "previous_response_not_found", 400, TYPE_INVALID_REQUEST
    TEMPLATE_ERROR = "template_error", 400, TYPE_INVALID_REQUEST
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded", 400, TYPE_INVALID_REQUEST
    EMPTY_PROMPT = "empty_prompt", 400, TYPE_INVALID_REQUEST
    INVALID_SCHEMA = "invalid_schema", 400, TYPE_INVALID_REQUEST
    POLICY_REJECTED = "policy_rejected", 400, TYPE_INVALID_REQUEST
    BAD_REQUEST = "bad_request", 400, TYPE_INVALID_REQUEST
    IMAGE_INVALID = "image_invalid", 400, TYPE_INVALID_REQUEST  # not a decodable base64 image, or a remote URL
    TOO_MANY_IMAGES = "too_many_images", 400, TYPE_INVALID_REQUEST
    IMAGE_TOO_LARGE = "image_too_large", 400, TYPE_INVALID_REQUEST  # too many pixels (too many bytes: 413)
    MODEL_NOT_VISION = "model_not_vision", 400, TYPE_INVALID_REQUEST  # an image sent to a text-only model
    MEDIA_UNSUPPORTED = "media_unsupported", 400, TYPE_INVALID_REQUEST  # a video, audio or file part: not taken yet
    MODEL_NOT_EMBEDDING = "model_not_embedding", 400, TYPE_INVALID_REQUEST  # embeddings asked of a chat model
    MODEL_NOT_CHAT = "model_not_chat", 400, TYPE_INVALID_REQUEST  # chat asked of an embedding model
    MODEL_NOT_THINKING = "model_not_thinking", 400, TYPE_INVALID_REQUEST  # Ollama think, to a template without it
    MODEL_NOT_RERANKER = "model_not_reranker", 400, TYPE_INVALID_REQUEST  # rerank: no model served here scores pairs
    # a media endpoint asked of a model of another kind (WorkerRecord.kind), param "model"
    MODEL_NOT_SPEECH = "model_not_speech", 400, TYPE_INVALID_REQUEST
    MODEL_NOT_TRANSCRIPTION = "model_not_transcription", 400, TYPE_INVALID_REQUEST
    MODEL_NOT_IMAGE_GENERATION = "model_not_image_generation", 400, TYPE_INVALID_REQUEST
    AUDIO_INVALID = "audio_invalid", 400, TYPE_INVALID_REQUEST  # an upload the front cannot decode as audio
    AUDIO_TOO_LONG = "audio_too_long", 400, TYPE_INVALID_REQUEST  # more seconds than a transcription takes
    AUDIO_FORMAT_UNSUPPORTED = "audio_format_unsupported", 400, TYPE_INVALID_REQUEST  # speech in a format not written
    MULTIPART_INVALID = "multipart_invalid", 400, TYPE_INVALID_REQUEST  # not a form, or a form we do not take
    # 401, 403: who is asking
    UNAUTHORIZED = "unauthorized", 401, TYPE_AUTHENTICATION
    INVALID_API_KEY = "invalid_api_key", 401, TYPE_AUTHENTICATION
    FORBIDDEN_HOST = "forbidden_host", 403, TYPE_PERMISSION
    FORBIDDEN_ORIGIN = "forbidden_origin", 403, TYPE_PERMISSION
    # 404 to 415: what was asked of which path
    MODEL_NOT_FOUND = "model_not_found", 404, TYPE_NOT_FOUND
    NOT_FOUND = "not_found", 404, TYPE_INVALID_REQUEST
    UNKNOWN_ENDPOINT = "unknown_endpoint", 404, TYPE_NOT_FOUND
    METHOD_NOT_ALLOWED = "method_not_allowed", 405, TYPE_INVALID_REQUEST
    BODY_TIMEOUT = "body_timeout", 408, TYPE_INVALID_REQUEST
    UNLOAD_BLOCKED = "unload_blocked", 409, TYPE_CONFLICT
    LENGTH_REQUIRED = "length_required", 411, TYPE_INVALID_REQUEST
    BODY_TOO_LARGE = "body_too_large", 413, TYPE_INVALID_REQUEST
    AUDIO_TOO_LARGE = "audio_too_large", 413, TYPE_INVALID_REQUEST  # an audio upload past its byte cap
    UNSUPPORTED_CONTENT_ENCODING = "unsupported_content_encoding", 415, TYPE_INVALID_REQUEST
    # 5xx: the server's own trouble
    INTERNAL_ERROR = "internal_error", 500, TYPE_SERVER
    GENERATION_FAILED = "generation_failed", 500, TYPE_SERVER
    # Ollama's pull, push, create, copy, delete and blobs: this server never downloads or changes a model
    MODEL_MANAGEMENT_UNSUPPORTED = "model_management_unsupported", 501, TYPE_SERVER
    REALTIME_UNSUPPORTED = "realtime_unsupported", 501, TYPE_SERVER  # mlx-vlm's realtime WebSocket: not served
    POLICY_NOT_SAVED = "policy_not_saved", 500, TYPE_SERVER
    SERVER_ERROR = "server_error", 500, TYPE_SERVER  # a failed Response object's error (OpenAI's own code)
    WORKER_FAILED = "worker_failed", 502, TYPE_SERVER
    WORKER_ERROR = "worker_error", 502, TYPE_SERVER  # a worker's error that named no code of its own
    COMPACTION_FAILED = "compaction_failed", 502, TYPE_SERVER
    GENERATION_UNAVAILABLE = "generation_unavailable", 503, TYPE_SERVER
    LOAD_FAILED = "load_failed", 503, TYPE_SERVER
    ADAPTER_CHANGED = "adapter_changed", 503, TYPE_SERVER
    MODEL_CHANGED = "model_changed", 503, TYPE_SERVER
    RUNTIME_CHANGED = "runtime_changed", 503, TYPE_SERVER
    TOO_MANY_LOADED = "too_many_loaded", 503, TYPE_SERVER
    INSUFFICIENT_HEADROOM = "insufficient_headroom", 503, TYPE_SERVER
    MEMORY_UNKNOWN = "memory_unknown", 503, TYPE_SERVER
    DISK_FULL = "disk_full", 503, TYPE_SERVER  # the worker broke off while its log or cache disk is under its floor
    QUEUE_FULL = "queue_full", 503, TYPE_SERVER  # --max-queue requests wait for the model's worker already
    INSUFFICIENT_MEMORY = "insufficient_memory", 503, TYPE_SERVER  # the request's KV cache would not fit
    WORKER_WEDGED = "worker_wedged", 503, TYPE_SERVER  # the worker sent nothing for --stall-timeout: replaced


_LISTED: dict[str, Code] = {member.value: member for member in Code}


def anthropic_type(status: int) -> str:
    """Return Anthropic's error type for an HTTP status."""
    if status in ANTHROPIC_TYPES:
        return ANTHROPIC_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def known(code: object) -> Code | None:
    """Return the ``Code`` a string names, or None for a code this module does not list (a worker's own)."""
    return _LISTED.get(code) if isinstance(code, str) else None


def error_body(
    family: Family,
    code: str | None,
    message: str,
    *,
    status: int | None = None,
    type_: str | None = None,
    param: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Return the error body ``family`` answers for ``code``.

    ``status`` defaults to the code's and ``type_`` (the OpenAI type) to the code's kind; ``extra`` fields ride
    along in ``error``. An Anthropic body is typed by the status and carries no null field.
    """
    listed = known(code)
    if status is None:
        status = listed.status if listed is not None else 500
    if type_ is None:
        type_ = listed.kind if listed is not None else TYPE_INVALID_REQUEST if status < 500 else TYPE_SERVER
    inner = {"message": message, "type": type_, "param": param, "code": None if code is None else str(code), **extra}
    body = {"error": inner}
    if family is Family.ANTHROPIC:
        return anthropic_body(status, body)
    return ollama_body(status, body) if family is Family.OLLAMA else body


def anthropic_body(status: int, body: object) -> dict[str, Any]:
    """Return an OpenAI-style error body (a worker's, the front door's) in Anthropic's shape."""
    inner = body.get("error") if isinstance(body, dict) else None
    details = dict(inner) if isinstance(inner, dict) else {"message": str(inner)}
    message = str(details.pop("message", None) or f"request failed with status {status}")
    details.pop("type", None)
    fields = {k: v for k, v in details.items() if v is not None}
    return {"type": "error", "error": {"type": anthropic_type(status), "message": message, **fields}}


def ollama_body(status: int, body: object) -> dict[str, Any]:
    """Return an OpenAI-style error body (a worker's, the front door's) in Ollama's shape."""
    inner = body.get("error") if isinstance(body, dict) else None
    details = dict(inner) if isinstance(inner, dict) else {"message": inner}
    message = str(details.get("message") or f"request failed with status {status}")
    out: dict[str, Any] = {"error": message}
    for name in ("code", "param"):
        if details.get(name) is not None:
            out[name] = str(details[name])
    return out
