"""What the OpenAI Responses endpoints accept (``/v1/responses`` and its ``compact``): a closed whitelist.

Declared as every body is (``mlx_agent.bodies``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from mlx_agent.bodies import Body, Declared, Limit, Object, Temperature, Tools, Unit, nonempty_text, one_of


class Reasoning(Declared):
    """The Responses ``reasoning`` object (``summary``: none are made; reasoning comes back as written)."""

    closed = True
    effort: Any = None
    summary: Any = None
    generate_summary: Any = None

    @field_validator("effort")
    @classmethod
    def _effort(cls, value: Any) -> Any:
        return nonempty_text(value, "'low' or 'high'")


class Text(Declared):
    """The Responses ``text`` object: ``format`` as the reply's format, ``verbosity`` accepted."""

    closed = True
    format: Any = None
    verbosity: Any = None

    @field_validator("format")
    @classmethod
    def _format(cls, value: Any) -> Any:
        kind = value.get("type") if isinstance(value, dict) else None
        if value is None or kind in ("text", "json_object"):
            return value
        if kind == "json_schema" and isinstance(value.get("schema"), dict):
            return value
        raise ValueError("must be text, json_object or json_schema with a schema")


class ResponsesBody(Body):
    """``POST /v1/responses`` and ``POST /v1/responses/compact``."""

    closed = True
    stream: bool | None = None
    input: Any = None
    instructions: str | None = None
    max_output_tokens: Limit | None = None
    temperature: Temperature | None = None
    top_p: Unit | None = None
    tools: Tools | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    include: Annotated[list[str], Field(max_length=64)] | None = None
    store: bool | None = None
    background: bool | None = None
    previous_response_id: str | None = None
    metadata: Object | None = None
    reasoning: Reasoning | None = None
    text: Text | None = None
    truncation: Any = None
    prompt_cache_key: str | None = None
    client_metadata: Object | None = None
    user: str | None = None
    safety_identifier: str | None = None
    service_tier: str | None = None
    prompt_cache_retention: str | None = None
    stream_options: Object | None = None

    @field_validator("input")
    @classmethod
    def _input(cls, value: Any) -> Any:
        return one_of(value, (str, list), "a string or a list of items")

    @field_validator("tool_choice")
    @classmethod
    def _choice(cls, value: Any) -> Any:
        return one_of(value, (str, dict), "a string or an object")

    @field_validator("truncation")
    @classmethod
    def _truncation(cls, value: Any) -> Any:
        if value not in (None, "disabled", "auto"):
            raise ValueError("must be 'auto' or 'disabled'")
        return value

    @field_validator("previous_response_id")
    @classmethod
    def _previous(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise PydanticCustomError("string_type", "must be a response id")
        return value
