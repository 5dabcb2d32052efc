"""Codex's model catalogue: the ModelsResponse the front answers `GET /v1/models?client_version=` with (pure)."""

from __future__ import annotations

from typing import Any

from mlx_agent.gateway.openai.codex_models import base_instructions, catalogue, wants_catalogue

# The fields Codex 0.171 cannot decode an entry without (openai/codex ``ModelInfo``, checked against the binary).
REQUIRED = {
    "slug",
    "display_name",
    "description",
    "supported_reasoning_levels",
    "shell_type",
    "visibility",
    "supported_in_api",
    "priority",
    "upgrade",
    "base_instructions",
    "supports_reasoning_summaries",
    "support_verbosity",
    "default_verbosity",
    "apply_patch_tool_type",
    "truncation_policy",
    "supports_parallel_tool_calls",
    "experimental_supported_tools",
}


def model(name: str, kind: str = "text", window: int | None = 32768, ceiling: int | None = 4096, **extra: Any) -> Any:
    """Return a front model config as the plan gives it (the fields the catalogue reads)."""
    return name, {
        "served_model_name": name,
        "alias": extra.get("alias", []),
        "context_window": window,
        "max_tokens_ceiling": ceiling,
        "worker": {"kind": kind},
    }


def test_only_codexs_refresh_gets_the_catalogue() -> None:
    """The shape is chosen by Codex's ``client_version`` parameter; every other listing stays OpenAI's."""
    assert wants_catalogue({"client_version": "0.171.0"})
    assert not wants_catalogue({}) and not wants_catalogue({"limit": "5"})


def test_each_chat_name_gets_its_window_and_compaction_point() -> None:
    """Served names and literal aliases get entries (aliases hidden); the window, and 90% or window - ceiling."""
    doc = catalogue(
        [
            model("coder", alias=["gpt-5-codex", "gpt-*"]),
            model("seer", kind="vision", window=131072, ceiling=None),
            model("embedder", kind="embedding"),
            model("speaker", kind="speech"),
        ]
    )
    entries = doc["models"]
    assert [e["slug"] for e in entries] == ["coder", "gpt-5-codex", "seer"]  # no glob, no embedding or media model
    assert all(e.keys() >= REQUIRED for e in entries)
    assert [e["visibility"] for e in entries] == ["list", "hide", "list"]
    assert [e["priority"] for e in entries] == [1, 2, 3]
    coder, alias, seer = entries
    assert (coder["context_window"], coder["auto_compact_token_limit"]) == (32768, 32768 - 4096)
    assert (seer["context_window"], seer["auto_compact_token_limit"]) == (131072, int(131072 * 0.9))
    assert coder["input_modalities"] == ["text"] and seer["input_modalities"] == ["text", "image"]
    assert alias["context_window"] == coder["context_window"]


def test_what_the_plan_does_not_know_is_codexs_own_fallback() -> None:
    """No window without one; no reasoning levels or summaries; Codex's own base prompt as the instructions."""
    [entry] = catalogue([model("coder", window=None, ceiling=None)])["models"]
    assert "context_window" not in entry and "auto_compact_token_limit" not in entry
    assert entry["supported_reasoning_levels"] == [] and entry["supports_reasoning_summaries"] is False
    assert entry["base_instructions"] == base_instructions()
    assert base_instructions().startswith("You are a coding agent running in the Codex CLI")
