"""Codex's model catalogue: ``GET /v1/models?client_version=X`` answered in Codex's own ``ModelsResponse`` shape.

Codex (0.171, with a provider whose key comes from an ``auth`` command, as `run codex` and `wire codex` write
for a keyed server) refreshes its catalogue from the provider's ``/models`` with its version as
``client_version``, and decodes ``{"models": [ModelInfo, ...]}`` (openai/codex, ``protocol/src/openai_models.rs``;
the field set checked against the pinned binary: an entry it cannot decode fails the whole refresh, and then
every model gets Codex's "fallback metadata": a 272000-token window and its guesses). Every other client of
``/v1/models`` gets the OpenAI list (``passthrough.py``); only this query parameter selects this shape.

Each chat model's names a client can pick (the served name, then its literal aliases, hidden from Codex's
picker) get an entry: the context window, the compaction point (``agent_names.compact_limit``: 90% of the
window, lower when the reply ceiling needs more room, the rule `run` and `wire` give Codex too), images only for
a vision model. What the front does not know is Codex's own fallback value, so the catalogue changes nothing
else: no reasoning levels (Codex then asks for no effort, and the model thinks as its plan set it), no
reasoning summaries (the front makes none), Codex's own shell and patch tools, single tool calls.
``base_instructions`` is required: it is Codex's own base prompt (``codex_instructions.md``: the constant the
pinned binary holds, verbatim; openai/codex is Apache-2.0), so Codex uses the instructions it uses with
fallback metadata, byte for byte (and removes the sections whose tools are off, either way).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from mlx_agent.agent_names import compact_limit, is_pattern
from mlx_agent.gateway.model_kinds import NOT_CHAT

CLIENT_VERSION_PARAM = "client_version"  # Codex's query parameter: what selects this shape
INSTRUCTIONS_FILE = Path(__file__).with_name("codex_instructions.md")
DESCRIPTION = "Served locally by mlx-agent."
# Codex's fallback values (``model_info_from_slug``) for what the plan does not decide.
TRUNCATION = {"mode": "bytes", "limit": 10000}  # how much of a tool's output Codex keeps


def wants_catalogue(query: Mapping[str, str]) -> bool:
    """Say whether a ``/v1/models`` request is Codex's catalogue refresh (it names its version)."""
    return CLIENT_VERSION_PARAM in query


@cache
def base_instructions() -> str:
    """Return Codex's own base prompt (read once)."""
    return INSTRUCTIONS_FILE.read_text(encoding="utf-8")


def model_info(name: str, model: Mapping[str, Any], priority: int, listed: bool) -> dict[str, Any]:
    """Return Codex's ``ModelInfo`` for ``name``, a name of the plan's ``model`` (``listed``: in Codex's picker)."""
    window, ceiling = model.get("context_window"), model.get("max_tokens_ceiling")
    output = min(ceiling, window) if ceiling and window else ceiling
    vision = model["worker"].get("kind") == "vision"
    info: dict[str, Any] = {
        "slug": name,
        "display_name": name,
        "description": DESCRIPTION,
        "supported_reasoning_levels": [],
        "shell_type": "default",
        "visibility": "list" if listed else "hide",
        "supported_in_api": True,
        "priority": priority,
        "upgrade": None,
        "base_instructions": base_instructions(),
        "supports_reasoning_summaries": False,
        "support_verbosity": False,
        "default_verbosity": None,
        "apply_patch_tool_type": None,
        "truncation_policy": TRUNCATION,
        "supports_parallel_tool_calls": False,
        "experimental_supported_tools": [],
        "input_modalities": ["text", "image"] if vision else ["text"],
    }
    if window:
        info["context_window"] = window
        info["auto_compact_token_limit"] = compact_limit(window, output)
    return info


def catalogue(models: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Return Codex's ``ModelsResponse`` for the chat models: (served name, plan model) in the fleet's order."""
    entries: list[dict[str, Any]] = []
    for name, model in models:
        if model["worker"].get("kind") in NOT_CHAT:
            continue  # no chat, so nothing Codex can use
        literal = [a for a in model["alias"] if not is_pattern(a)]
        for index, shown in enumerate((name, *literal)):
            entries.append(model_info(shown, model, len(entries) + 1, listed=index == 0))
    return {"models": entries}
