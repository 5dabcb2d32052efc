"""The typed shape of ``mlx-agent models``'s listing: one row per model found (``schemas/models_listing.json``).

Kept apart from ``records/`` (plans and receipts, which nothing here writes); ``scripts/schemas`` generates the
schema from these declarations as it does the others.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

STRICT = ConfigDict(extra="forbid", strict=True)


@with_config(STRICT)
class Problem(TypedDict):
    """Why a model is not complete, or why no runtime serves it: the refusal ``serve start`` would give."""

    code: str
    message: str


@with_config(STRICT)
class Quantization(TypedDict):
    """The weights' quantization as config.json records it (mlx_lm's ``quantization`` key)."""

    bits: int | None
    group_size: int | None


@with_config(STRICT)
class AgentsSummary(TypedDict):
    """What the plan's ``agents`` record says of the model's chat template (``plan/agent_support.py``)."""

    chat_template: bool
    renders_tools: bool
    render_error: str | None
    tool_parser: str | None
    tool_parser_from: Literal["option", "checkpoint", "template", "runtime"]
    thinking: bool


@with_config(STRICT)
class Memory(TypedDict):
    """The JIT admission's estimate of a load (weights x 1.10 + the runtime allowance) against free memory now."""

    weight_bytes: int | None
    estimate_bytes: int | None
    available_bytes: int | None
    fits: bool | None


@with_config(STRICT)
class Served(TypedDict):
    """A running server of this home whose receipt names the model."""

    port: int
    served_model_name: str | None


@with_config(STRICT)
class ModelRow(TypedDict):
    """One model found: where it is, whether it is complete, and what ``serve start`` (runtime auto) makes of it."""

    name: str
    source: Literal["hf_cache", "path"]
    repo: str | None
    revision: str | None
    path: str | None
    complete: bool
    missing: list[str]
    problem: Problem | None
    runtime: str | None
    kind: Literal["text", "vision", "embedding", "speech", "transcription", "image_generation"] | None
    runtime_reason: str | None
    runtime_problem: Problem | None
    size_bytes: int
    quantization: Quantization | None
    context_window: int | None
    vision: bool
    agents: AgentsSummary | None
    memory: Memory | None
    served: list[Served]


@with_config(STRICT)
class ModelsListing(TypedDict):
    """``models --json``'s data: where it looked and one row per model found."""

    hf_cache: str
    dirs: list[str]
    receipts_dir: str
    models: list[ModelRow]
