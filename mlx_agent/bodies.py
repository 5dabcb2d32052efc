r"""What both processes check: the JSON a body may be, the declaration rules, and chat and text completions.

``load_json`` reads a body: UTF-8 without a byte order mark (the APIs say so; ``json`` would read UTF-16, UTF-32
and a BOM: ``invalid_encoding``), JSON, an object, at most ``MAX_DEPTH`` levels deep, no string that is not valid
UTF-8 (a lone surrogate, which ``json`` accepts as ``\udc00``), no NaN or Infinity (``json`` accepts those too),
at most ``MAX_ITEMS`` items in any array or object. ``check`` then validates it against its endpoint's
declaration and returns the parsed body, which translators read: every number that reaches mlx is bounded to
what mlx and the models can use (a temperature of 2^63 or a ``logit_bias`` key past the vocabulary kills
mlx_lm's generation thread or the process), every field has its type. A refusal is ``BodyInvalid`` with the
field's path as ``param``.

An open declaration (chat and text completions) passes undeclared fields on (the worker reads them); a closed
one (``closed = True``: Messages, Responses, and the objects inside them) is the endpoint's whitelist, and an
undeclared field with a value is refused as ``unsupported_parameter``. Both the front and the worker check chat
and text completions, so a worker defends itself whoever calls it. Every other endpoint's declaration lives with
its family (``gateway/openai/bodies.py``, ``gateway/anthropic/bodies.py``, ``gateway/responses/bodies.py``,
``gateway/ollama/bodies.py``), read by the front alone, so changing one does not change what a worker runs.
"""

from __future__ import annotations

import codecs
import json
import math
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from mlx_agent.api_errors import Code
from mlx_agent.errors import BodyInvalid

MAX_DEPTH = 64  # nesting of arrays and objects (a tool's JSON Schema rarely passes 10)
MAX_ITEMS = 100_000  # entries of one array or object
MAX_TOKENS = 2**31 - 1  # the largest reply limit a request may ask for (the ceiling then applies)
MAX_STOP = 16  # stop sequences
MAX_BIAS = 1024  # logit_bias entries
MAX_TOOLS = 1024
BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # UTF-32's begin with UTF-16's or a NUL

Float = Annotated[float, Field(allow_inf_nan=False)]
Unit = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Penalty = Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)]
Window = Annotated[int, Field(ge=0, le=1_000_000)]
Limit = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Temperature = Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)]
TopK = Annotated[int, Field(ge=0, le=1_000_000)]
Tools = Annotated[list[dict[str, Any]], Field(max_length=MAX_TOOLS)]
Object = dict[str, Any]


def _walk(value: Any, path: str, depth: int) -> None:
    """Refuse nesting past ``MAX_DEPTH``, oversized containers, non-finite numbers and strings not valid UTF-8."""
    if isinstance(value, float):
        # ``json`` reads NaN and Infinity, which JSON has not. Passed on in an undeclared field, mlx-vlm (FastAPI)
        # cannot write its own 422 for one (the echoed input is no JSON either) and answers 500.
        if not math.isfinite(value):
            raise BodyInvalid(
                f"'{path or 'body'}' is {value}: NaN and Infinity are not JSON numbers; send a finite number",
                param=path or "body",
            )
        return
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
    """Return the body's JSON object; raise ``BodyInvalid`` (``invalid_encoding``, ``invalid_json``) otherwise."""
    # JSON text never holds a raw NUL, so one means UTF-16 or UTF-32 (which are valid UTF-8 when ASCII).
    if raw.startswith(BOMS) or b"\x00" in raw:
        raise BodyInvalid(
            "the request body must be UTF-8 JSON without a byte order mark", param="body", code=Code.INVALID_ENCODING
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyInvalid(
            f"the request body is not valid UTF-8 (byte {exc.start})", param="body", code=Code.INVALID_ENCODING
        ) from None
    try:
        doc = json.loads(text)
    except RecursionError:
        raise BodyInvalid(
            f"the body is nested more than {MAX_DEPTH} levels deep", param="body", code=Code.INVALID_JSON
        ) from None
    except ValueError as exc:
        raise BodyInvalid(f"the request body is not valid JSON: {exc}", param="body", code=Code.INVALID_JSON) from None
    if not isinstance(doc, dict):
        raise BodyInvalid("the request body must be a JSON object", param="body", code=Code.INVALID_JSON)
    _walk(doc, "", 0)
    return doc


class Declared(BaseModel):
    """A JSON object with declared fields; ``closed`` ones refuse undeclared fields that carry a value."""

    model_config = ConfigDict(extra="allow", strict=True)
    closed: ClassVar[bool] = False


class Body(Declared):
    """Fields every endpoint shares."""

    model: str | None = None
    _sent: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def sent(self) -> dict[str, Any]:
        """Return the JSON object as the client sent it (what a pass-through endpoint forwards)."""
        return self._sent


def one_of(value: Any, kinds: tuple[type, ...], what: str) -> Any:
    """Check a field that takes one of several JSON types (one clear error instead of one per member)."""
    if value is not None and not isinstance(value, kinds):
        raise ValueError(f"must be {what}")
    return value


def nonempty_text(value: Any, example: str) -> Any:
    """Check a field that must be a non-empty string when given (an invalid_value, as it always was)."""
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"must be a string such as {example}")
    return value


def stops(value: Any, limit: int = MAX_STOP) -> Any:
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

    stream: bool | None = None
    max_tokens: Limit | None = None
    max_completion_tokens: Limit | None = None
    temperature: Temperature | None = None
    top_p: Unit | None = None
    top_k: TopK | None = None
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
    stream_options: Object | None = None

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
        return stops(value)


class ChatBody(Sampling):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[Object], Field(min_length=1)]
    tools: Tools | None = None
    tool_choice: Any = None
    response_format: Object | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: Object | None = None
    reasoning_effort: str | None = None

    @field_validator("tool_choice")
    @classmethod
    def _choice(cls, value: Any) -> Any:
        return one_of(value, (str, dict), "a string or an object")


class CompletionBody(Sampling):
    """``POST /v1/completions``."""

    prompt: str


class TokenizeBody(Body):
    """``POST /v1/tokenize``: a ``text`` as a completion's prompt is read, or ``messages`` as a chat's is rendered."""

    closed = True
    text: str | None = None
    messages: Annotated[list[Object], Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _one(self) -> TokenizeBody:
        if (self.text is None) == (self.messages is None):
            raise ValueError("send exactly one of 'text' and 'messages'")
        return self


B = TypeVar("B", bound=Body)


def _undeclared(found: BaseModel, path: str) -> None:
    """Refuse a closed declaration's undeclared fields that carry a value, at any depth, the first by name."""
    if isinstance(found, Declared) and found.closed:
        extra = found.model_extra or {}
        for name in sorted(extra):
            if extra[name] is not None:
                where = f"{path}.{name}" if path else name
                message = (
                    f"{where} is not supported here"
                    if path
                    else f"'{name}' is not supported: the local runtime cannot honour it"
                )
                raise BodyInvalid(message, param=where, code=Code.UNSUPPORTED_PARAMETER)
    for name in type(found).model_fields:
        value = getattr(found, name)
        if isinstance(value, BaseModel):
            _undeclared(value, f"{path}.{name}" if path else name)


def check(declaration: type[B], doc: dict[str, Any]) -> B:
    """Return ``doc`` parsed by its endpoint's declaration; raise ``BodyInvalid`` naming the field."""
    try:
        body = declaration.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(part) for part in first["loc"]) or "body"
        kind = first["type"]
        code = Code.INVALID_TYPE if kind.endswith("_type") or kind == "literal_error" else Code.INVALID_VALUE
        if kind == "missing":
            code, message = Code.MISSING_PARAMETER, f"'{param}' is required"
        else:
            message = f"'{param}': {first['msg'].removeprefix('Value error, ')}"
        raise BodyInvalid(message, param=param, code=code) from None
    _undeclared(body, "")
    body._sent = doc  # set once, here, where the body is parsed
    return body
