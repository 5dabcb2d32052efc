"""Checking and rewriting an OpenAI-style request body before it reaches a model's worker (pure).

The front has already chosen the model (``Fleet.route``); the worker serves its one model only, so the
body is sent on with ``model: default_model`` and the reply names the model as the client did (or by its
served name when the request named none). Request-time adapters and draft models are refused, and so is a
chat request to an embedding or media model (``model_not_chat``); every content part is held to its model kind's
whitelist (``content_parts``: images to ``images``' limits and one shape, refused by a text-only model; video,
audio and files refused), and so are mlx-vlm's image-size fields (``images.check_processing``). Reply limits:
a request's own ``max_tokens`` / ``max_completion_tokens`` is honoured up to ``max_tokens_ceiling`` when the
plan sets one, and otherwise up to what the model's context leaves after the prompt (our worker knows the
prompt's length and cuts there). A request that sets none gets the plan's ``--max-tokens`` when the plan has
one, and otherwise the ceiling:
agents that send no limit (Codex) are not cut at a small default, and the worker's own reply limits (repeats,
hedging, the reasoning budget) keep a looping model in check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlx_agent.api_errors import Code
from mlx_agent.gateway.content_parts import check_messages
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.images import check_processing
from mlx_agent.gateway.model_kinds import chat_refusal
from mlx_agent.wire import WORKER_MODEL_NAME

if TYPE_CHECKING:
    from mlx_agent.records.front import FrontModelConfig

FORBIDDEN_FIELDS = ("adapters", "adapter", "adapter_path", "draft_model")
TOKEN_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens")


@dataclass(frozen=True)
class PreparedRequest:
    """A body ready for the worker, and what the reply needs to be rewritten back for the client."""

    body: dict[str, Any]
    stream: bool
    client_model: str  # the name the reply gives the model: the client's, or the served name
    worker_model: str  # the name the worker gives it
    usage_requested: bool = False  # the client asked for a usage chunk in its stream
    requested_max_tokens: int | None = None  # the client's own limit, if it set one


def reply_limit(requested: int | None, model: FrontModelConfig) -> int | None:
    """Return the ``max_tokens`` the worker gets: the request's own up to the ceiling, else the default.

    The default is the plan's ``max_tokens``, or without one the ceiling, which is the plan's
    ``max_tokens_ceiling`` or else the model's context window (our worker cuts that to the room the prompt
    leaves). None only when nothing is known: the worker's own default then applies.
    """
    ceiling = model["max_tokens_ceiling"]
    if requested is None:
        default = model["max_tokens"]
        return default if default is not None else ceiling if ceiling is not None else model["context_window"]
    if ceiling is None and not model["worker"]["cuts_to_context"]:
        ceiling = model["context_window"]  # a runtime's own server cannot cut by the prompt's length
    return requested if ceiling is None else min(requested, ceiling)


def prepare(body: dict[str, Any], *, model: FrontModelConfig, force_usage: bool = False) -> PreparedRequest:
    """Return the worker's copy of ``body``; raise ``RequestRefused`` (400) for anything the front refuses.

    ``body`` has passed its declaration (types and bounds: ``bodies``), as sent or as a translator wrote it.
    ``force_usage`` asks a stream for its usage chunk even if the client did not (the front needs the token
    counts; the chunk is then dropped on the way back).
    """
    for name in FORBIDDEN_FIELDS:
        if name in body:
            raise refused(
                Code.UNSUPPORTED_PARAMETER,
                f"'{name}' is not accepted: this endpoint serves its reviewed models only; "
                "preview a new serve plan to change adapters or draft models",
                param=name,
            )
    check_processing(body)
    kind = model["worker"].get("kind")
    if (refusal := chat_refusal(model)) is not None:
        raise refusal
    stream = bool(body.get("stream", False))

    out = dict(body)
    if isinstance(body.get("messages"), list):
        out["messages"], _ = check_messages(body["messages"], model=model["served_model_name"], kind=kind)
    client_model = body.get("model")
    out["model"] = model["worker"]["model_name"]
    requested: int | None = None
    for name in TOKEN_LIMIT_FIELDS:
        value = out.pop(name, None)
        if value is not None:
            requested = value if requested is None else min(requested, value)
    limit = reply_limit(requested, model)
    if limit is not None:
        out["max_tokens"] = limit

    options = out.get("stream_options")
    usage_requested = bool(stream and options and options.get("include_usage"))
    if stream and force_usage and not usage_requested:
        out["stream_options"] = {**(options or {}), "include_usage": True}
    name = (
        client_model
        if isinstance(client_model, str) and client_model and client_model != WORKER_MODEL_NAME
        else model["served_model_name"]
    )
    return PreparedRequest(out, stream, name, model["worker"]["model_name"], usage_requested, requested)
