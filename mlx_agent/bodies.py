r"""What every endpoint accepts, declared once: the JSON a body may be, and the fields that reach mlx.

``load_json`` reads a body: JSON, an object, at most ``MAX_DEPTH`` levels deep, no string that is not valid
UTF-8 (a lone surrogate, which ``json`` accepts as ``\udc00``), at most ``MAX_ITEMS`` items in any array or
object. ``check`` then validates it against its endpoint's declaration: every number that reaches mlx is
bounded to what mlx and the models can use (a temperature of 2^63 or a ``logit_bias`` key past the vocabulary
kills mlx_lm's generation thread or the process), every field has its type. Fields that are not declared
pass through (the endpoint's own translation or the worker reads them). Both the front and the worker check,
so a worker defends itself whoever calls it. A refusal is ``BodyInvalid`` with the field's path as ``param``.
"""

from __future__ import annotations

import functools
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlx_agent.errors import BodyInvalid

MAX_DEPTH = 64  # nesting of arrays and objects (a tool's JSON Schema rarely passes 10)
MAX_ITEMS = 100_000  # entries of one array or object
MAX_TOKENS = 2**31 - 1  # the largest reply limit a request may ask for (the ceiling then applies)
MAX_STOP = 16  # stop sequences
MAX_BIAS = 1024  # logit_bias entries

Float = Annotated[float, Field(allow_inf_nan=False)]
Unit = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Penalty = Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)]
Window = Annotated[int, Field(ge=0, le=1_000_000)]
Limit = Annotated[int, Field(ge=1, le=MAX_TOKENS)]


def _walk(value: Any, path: str, depth: int) -> None:
    """Refuse nesting past ``MAX_DEPTH``, oversized containers and strings that are not valid UTF-8."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BodyInvalid(
                    f"'{path or 'body'}' is not valid UTF-8 (a lone surrogate)", param=path or "body"
                ) from None
        return
    if isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            raise BodyInvalid(f"the body is nested more than {MAX_DEPTH} levels deep", param=path or "body")
        if len(value) > MAX_ITEMS:
            raise BodyInvalid(f"'{path or 'body'}' has more than {MAX_ITEMS} entries", param=path or "body")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, sub in items:
            if isinstance(key, str):
                _walk(key, path, depth)
            _walk(sub, f"{path}.{key}" if path else str(key), depth + 1)


def load_json(raw: bytes) -> dict[str, Any]:
    """Return the body's JSON object; raise ``BodyInvalid`` (``invalid_json``) for anything else."""
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise BodyInvalid(
            f"the body is nested more than {MAX_DEPTH} levels deep", param="body", code="invalid_json"
        ) from None
    except ValueError as exc:  # bad UTF-8 and bad JSON alike
        raise BodyInvalid(f"the request body is not valid JSON: {exc}", param="body", code="invalid_json") from None
    if not isinstance(doc, dict):
        raise BodyInvalid("the request body must be a JSON object", param="body", code="invalid_json")
    _walk(doc, "", 0)
    return doc


class Body(BaseModel):
    """Fields every endpoint shares; undeclared fields pass through."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str | None = None
    stream: bool | None = None


def _one_of(value: Any, kinds: tuple[type, ...], what: str) -> Any:
    """Check a field that takes one of several JSON types (one clear error instead of one per member)."""
    if value is not None and not isinstance(value, kinds):
        raise ValueError(f"must be {what}")
    return value


def _stops(value: Any, limit: int = MAX_STOP) -> Any:
    """Check stop sequences: a string or a list of at most ``limit`` non-empty strings."""
    texts = [value] if isinstance(value, str) else value
    if value is None:
        return value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ValueError("must be a string or a list of strings")
    if len(texts) > limit:
        raise ValueError(f"must hold at most {limit} sequences")
    if not all(texts):
        raise ValueError("a stop sequence must not be empty")
    return value


class Sampling(Body):
    """The OpenAI-style sampling and limit fields mlx_lm reads (chat and text completions)."""

    max_tokens: Limit | None = None
    max_completion_tokens: Limit | None = None
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] | None = None
    top_p: Unit | None = None
    top_k: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    min_p: Unit | None = None
    repetition_penalty: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] | None = None
    repetition_context_size: Window | None = None
    presence_penalty: Penalty | None = None
    presence_context_size: Window | None = None
    frequency_penalty: Penalty | None = None
    frequency_context_size: Window | None = None
    xtc_probability: Unit | None = None
    xtc_threshold: Unit | None = None
    logit_bias: Annotated[dict[str, Annotated[float, Field(ge=-100, le=100)]], Field(max_length=MAX_BIAS)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=11)] | None = None
    seed: Annotated[int, Field(ge=0, le=2**64 - 1)] | None = None
    stop: Any = None
    n: Literal[1] | None = None
    num_draft_tokens: Annotated[int, Field(ge=0, le=64)] | None = None
    stream_options: dict[str, Any] | None = None

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            if not key.isdigit() or int(key) >= 2**31:
                raise ValueError(f"logit_bias keys must be token ids (0 to 2^31-1), not {key!r}")
        return value

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        return _stops(value)


class ChatBody(Sampling):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[dict[str, Any]], Field(min_length=1)]
    tools: Annotated[list[dict[str, Any]], Field(max_length=1024)] | None = None
    tool_choice: Any = None
    response_format: dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    reasoning_effort: str | None = None

    @field_validator("tool_choice")
    @classmethod
    def _choice(cls, value: Any) -> Any:
        return _one_of(value, (str, dict), "a string or an object")


class CompletionBody(Sampling):
    """``POST /v1/completions``."""

    prompt: str


class Thinking(BaseModel):
    """Anthropic's ``thinking`` object: ``display`` is any string (only ``omitted`` changes the reply)."""

    model_config = ConfigDict(extra="allow", strict=True)

    type: str | None = None
    budget_tokens: Limit | None = None
    display: str | None = None


class MessagesBody(Body):
    """``POST /v1/messages`` (and ``count_tokens``, where ``max_tokens`` is not required)."""

    max_tokens: Limit | None = None
    messages: Annotated[list[dict[str, Any]], Field(min_length=1)]
    system: Any = None
    temperature: Unit | None = None
    top_p: Unit | None = None
    top_k: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    stop_sequences: Any = None
    tools: Annotated[list[dict[str, Any]], Field(max_length=1024)] | None = None
    tool_choice: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    thinking: Thinking | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError("must be a list of strings")
        return _stops(value)

    @field_validator("system")
    @classmethod
    def _system(cls, value: Any) -> Any:
        return _one_of(value, (str, list), "a string or a list of text blocks")


class ResponsesBody(Body):
    """``POST /v1/responses``."""

    input: Any = None
    instructions: str | None = None
    max_output_tokens: Limit | None = None
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] | None = None
    top_p: Unit | None = None
    tools: Annotated[list[dict[str, Any]], Field(max_length=1024)] | None = None
    tool_choice: str | dict[str, Any] | None = None
    include: Annotated[list[str], Field(max_length=64)] | None = None
    parallel_tool_calls: bool | None = None
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("input")
    @classmethod
    def _input(cls, value: Any) -> Any:
        return _one_of(value, (str, list), "a string or a list of items")

    @field_validator("tool_choice")
    @classmethod
    def _choice(cls, value: Any) -> Any:
        return _one_of(value, (str, dict), "a string or an object")


ENDPOINTS: dict[str, type[Body]] = {
    "chat": ChatBody,
    "completions": CompletionBody,
    "messages": MessagesBody,
    "responses": ResponsesBody,
}


@functools.cache
def _adapter(endpoint: str) -> type[Body]:
    return ENDPOINTS[endpoint]


def check(endpoint: str, doc: dict[str, Any]) -> None:
    """Validate a parsed body against its endpoint's declaration; raise ``BodyInvalid`` naming the field."""
    try:
        _adapter(endpoint).model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or "body"
        kind = first["type"]
        code = "invalid_type" if kind.endswith("_type") or kind == "literal_error" else "invalid_value"
        if kind == "missing":
            code, message = "missing_parameter", f"'{param}' is required"
        else:
            message = f"'{param}': {first['msg'].removeprefix('Value error, ')}"
        raise BodyInvalid(message, param=param, code=code) from None
