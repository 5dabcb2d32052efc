"""What the Anthropic Messages endpoints accept: a prompt (``count_tokens``), and a prompt with its reply's fields.

Closed whitelists, declared as every body is (``mlx_agent.bodies``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator

from mlx_agent.bodies import Body, Declared, Limit, Object, Tools, TopK, Unit, nonempty_text, one_of, stops


class Thinking(Declared):
    """Anthropic's ``thinking`` object: ``display`` is any string (only ``omitted`` changes the reply)."""

    type: Any = None  # enabled, disabled or adaptive: the translator refuses another (unsupported_parameter)
    budget_tokens: Limit | None = None
    display: str | None = None


class OutputConfig(Declared):
    """Anthropic's ``output_config``: ``effort`` for templates that read it, ``format`` an enforced JSON schema."""

    closed = True
    effort: Any = None
    format: Object | None = None

    @field_validator("effort")
    @classmethod
    def _effort(cls, value: Any) -> Any:
        return nonempty_text(value, "'low' or 'high'")

    @field_validator("format", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        if value is not None and (
            not isinstance(value, dict)
            or value.get("type") != "json_schema"
            or not isinstance(value.get("schema"), dict)
        ):
            raise ValueError("must be {'type': 'json_schema', 'schema': {...}}")
        return value


class PromptBody(Body):
    """``POST /v1/messages/count_tokens``: what makes an Anthropic Messages prompt (no reply fields)."""

    closed = True
    messages: Annotated[list[Object], Field(min_length=1)]
    system: Any = None
    tools: Tools | None = None
    tool_choice: Object | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    metadata: Object | None = None
    cache_control: Any = None  # accepted without effect (the worker caches prompt prefixes by itself)
    context_management: Any = None
    service_tier: Any = None
    safeguards: Any = None  # Claude Code's auto-mode check: refused with its reason (gateway/anthropic/safeguards.py)

    @field_validator("system")
    @classmethod
    def _system(cls, value: Any) -> Any:
        return one_of(value, (str, list), "a string or a list of text blocks")


class MessagesBody(PromptBody):
    """``POST /v1/messages``: a prompt and how to reply to it."""

    max_tokens: Limit | None = None
    stream: bool | None = None
    temperature: Unit | None = None
    top_p: Unit | None = None
    top_k: TopK | None = None
    stop_sequences: Any = None

    @field_validator("stop_sequences")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError("must be a list of strings")
        return stops(value)
