"""Checking and rewriting an OpenAI request body before it reaches the worker (pure).

The gateway serves its planned model only: ``model`` must be one of its names (or absent) and is sent on as
``default_model``, so the worker never loads anything else (mlx_lm would load a named path without the
planned adapter). Request-time adapters and draft models are refused, and ``max_tokens`` /
``max_completion_tokens`` are clamped to the plan's limit (filled in when absent).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlx_agent.errors import RequestRefused

FORBIDDEN_FIELDS = ("adapters", "adapter", "adapter_path", "draft_model")
TOKEN_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens")
WORKER_MODEL_NAME = "default_model"


@dataclass(frozen=True)
class PreparedRequest:
    """A body ready for the worker, and what the reply needs to be rewritten back for the client."""

    body: dict[str, Any]
    stream: bool
    client_model: str | None  # the name the client used, reported back in place of the worker's
    usage_requested: bool  # the client asked for a usage chunk in its stream


def _refuse(message: str, *, param: str, code: str) -> RequestRefused:
    return RequestRefused(400, message, code=code, param=param)


def prepare(body: object, *, endpoint: str, names: frozenset[str], max_tokens: int,
            force_usage: bool = False) -> PreparedRequest:
    """Return the worker's copy of ``body``; raise ``RequestRefused`` (400) for anything the gateway refuses.

    ``endpoint`` is ``chat`` or ``completions``. ``force_usage`` asks a stream for its usage chunk even if the
    client did not (the gateway needs the token counts; the chunk is then dropped on the way back).
    """
    if not isinstance(body, dict):
        raise _refuse("the request body must be a JSON object", param="body", code="invalid_body")
    for name in FORBIDDEN_FIELDS:
        if name in body:
            raise _refuse(f"'{name}' is not accepted: this endpoint serves its reviewed model only; "
                          "preview a new serve plan to change adapters or draft models",
                          param=name, code="unsupported_parameter")
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or model not in names):
        raise _refuse(f"The model '{model}' does not exist or is not served here; use one of: "
                      f"{', '.join(sorted(names))}", param="model", code="model_not_found")
    if endpoint == "chat" and not isinstance(body.get("messages"), list):
        raise _refuse("'messages' must be a list", param="messages", code="invalid_value")
    if endpoint == "completions" and not isinstance(body.get("prompt"), str):
        raise _refuse("'prompt' must be a string", param="prompt", code="invalid_value")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _refuse("'stream' must be true or false", param="stream", code="invalid_type")

    out = dict(body)
    out["model"] = WORKER_MODEL_NAME
    present = False
    for name in TOKEN_LIMIT_FIELDS:
        value = out.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise _refuse(f"'{name}' must be an integer", param=name, code="invalid_type")
        present = True
        out[name] = min(value, max_tokens)
    if not present:
        out["max_tokens"] = max_tokens

    options = out.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _refuse("'stream_options' must be an object", param="stream_options", code="invalid_type")
    usage_requested = bool(stream and options and options.get("include_usage"))
    if stream and force_usage and not usage_requested:
        out["stream_options"] = {**(options or {}), "include_usage": True}
    return PreparedRequest(out, stream, model if model != WORKER_MODEL_NAME else None, usage_requested)
