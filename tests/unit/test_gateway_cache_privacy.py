"""cached_tokens per API key: a key only sees cache hits its own earlier prompts explain."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_agent.gateway.cache_privacy import PromptLedger, PromptShape
from mlx_agent.worker_routes import WorkerRoute

pytestmark = pytest.mark.fast


def chat_shape(*contents: str, **fields: Any) -> PromptShape:
    """Return the shape of a chat request with one user message per content."""
    return PromptShape.of(WorkerRoute.CHAT, {"messages": [{"role": "user", "content": c} for c in contents], **fields})


def usage(cached: int, prompt: int = 100) -> dict[str, Any]:
    """Return a worker usage object."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": 1,
        "total_tokens": prompt + 1,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def test_another_keys_prompt_never_shows_as_cached() -> None:
    """Key B sending A's prompt sees 0 cached tokens, whatever the shared worker cache says."""
    ledger = PromptLedger()
    ledger.record("A", chat_shape("secret plan"), 40)
    report = usage(cached=39, prompt=40)
    ledger.rewrite_usage("B", chat_shape("secret plan"), report)
    assert report["prompt_tokens_details"]["cached_tokens"] == 0


def test_own_repeated_prompt_keeps_its_cached_tokens() -> None:
    """The same key repeating its prompt sees the worker's count, bounded by its own prompt length."""
    ledger = PromptLedger()
    ledger.record("A", chat_shape("hello"), 40)
    report = usage(cached=39, prompt=40)
    ledger.rewrite_usage("A", chat_shape("hello"), report)
    assert report["prompt_tokens_details"]["cached_tokens"] == 39


def test_own_prefix_bounds_what_is_reported() -> None:
    """A longer follow-up is credited at most its own earlier prompt (less the boundary token)."""
    ledger = PromptLedger()
    ledger.record("A", chat_shape("turn one"), 30)
    report = usage(cached=80, prompt=90)  # the worker matched more, from someone else's longer prompt
    ledger.rewrite_usage("A", chat_shape("turn one", "turn two"), report)
    assert report["prompt_tokens_details"]["cached_tokens"] == 29


def test_different_tools_or_messages_are_not_a_prefix() -> None:
    """Changing the tools, or an earlier message, breaks the prefix."""
    ledger = PromptLedger()
    ledger.record("A", chat_shape("x", "y"), 30)
    assert ledger.bound("A", chat_shape("x", "y", tools=[{"type": "function"}])) == 0
    assert ledger.bound("A", chat_shape("x", "z", "w")) == 0
    assert ledger.bound("A", chat_shape("x", "y", "w")) == 29


def test_completion_prompts_match_by_string_prefix() -> None:
    """For /v1/completions a string prefix of the prompt counts; chat and completions never mix."""
    ledger = PromptLedger()
    ledger.record("A", PromptShape.of(WorkerRoute.COMPLETIONS, {"prompt": "Once upon"}), 3)
    assert ledger.bound("A", PromptShape.of(WorkerRoute.COMPLETIONS, {"prompt": "Once upon a time"})) == 2
    assert ledger.bound("A", PromptShape.of(WorkerRoute.COMPLETIONS, {"prompt": "Once"})) == 0
    assert ledger.bound("A", chat_shape("Once upon a time")) == 0


def test_history_is_bounded_and_records_follow_usage() -> None:
    """Only the last HISTORY prompts are remembered; a usage rewrite records the prompt it saw."""
    ledger = PromptLedger(history=2)
    for word in ("a", "b", "c"):
        ledger.rewrite_usage("A", chat_shape(word), usage(cached=0, prompt=10))
    assert ledger.bound("A", chat_shape("a")) == 0
    assert ledger.bound("A", chat_shape("c")) == 10
