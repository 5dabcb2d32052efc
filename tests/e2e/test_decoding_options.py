"""End to end: a real mlx_lm worker with a draft model (speculative decoding) and with a quantized KV cache."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.conftest import Agent, free_port

pytestmark = pytest.mark.e2e

PROMPTS = ["def fibonacci(n):", "Write a list of colours:", "hello"]


def replies(agent: Agent, model: Path, *options: str) -> list[str]:
    """Serve ``model`` with ``options``, return its greedy replies to PROMPTS, and stop it."""
    port = free_port()
    agent.launch("--path", str(model), "--port", str(port), *options)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0)
        texts = []
        for prompt in PROMPTS:
            reply = client.chat.completions.create(
                model=model.name, max_tokens=24, temperature=0, messages=[{"role": "user", "content": prompt}]
            )
            assert reply.choices[0].message.content is not None
            texts.append(reply.choices[0].message.content)
        return texts
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def kept_caches(home: Path) -> dict[str, list[list[int]]]:
    """Return, per kept prompt-cache directory under ``home`` (one per served identity), each entry's layer offsets."""
    from mlx_lm.models.cache import load_prompt_cache

    def offsets(entry: Path) -> list[int]:
        return [layer.offset for layer in load_prompt_cache(str(entry))]  # type: ignore[no-untyped-call]

    root = home / "prompt-cache"
    return {folder.name: [offsets(entry) for entry in folder.glob("[!.]*.safetensors")] for folder in root.iterdir()}


def layer_count(model: Path) -> int:
    """Return how many transformer layers ``model`` has."""
    count: int = json.loads((model / "config.json").read_text())["num_hidden_layers"]
    return count


def test_a_draft_model_runs_and_serves_the_same_greedy_replies(
    agent: Agent, tiny_model: Path, tiny_draft: Path
) -> None:
    """Speculative decoding changes speed, not the greedy text; the draft model read every conversation too.

    The evidence that it ran is in the prompt caches the worker keeps when it stops: mlx_lm appends the draft's
    own caches to the target's, so each drafted conversation's entry has the draft's layers too, filled.
    """
    plain = replies(agent, tiny_model)
    before = kept_caches(agent.home)
    drafted = replies(agent, tiny_model, "--draft-model", str(tiny_draft), "--num-draft-tokens", "3")
    assert drafted == plain
    target, draft = layer_count(tiny_model), layer_count(tiny_draft)
    assert [len(offsets) for entries in before.values() for offsets in entries] == [target] * len(PROMPTS)
    [entries] = [entries for name, entries in kept_caches(agent.home).items() if name not in before]
    assert len(entries) == len(PROMPTS)
    for offsets in entries:
        assert len(offsets) == target + draft
        assert all(0 < offset <= offsets[0] for offset in offsets[target:])  # the draft read the conversation


def test_a_quantized_kv_cache_serves(agent: Agent, tiny_model: Path) -> None:
    """--kv-bits 8 reaches mlx_lm: the worker's argv carries it and requests are answered."""
    port = free_port()
    receipt = agent.launch("--path", str(tiny_model), "--port", str(port), "--kv-bits", "8")
    try:
        argv = receipt["plan"]["models"][0]["worker"]["argv"]
        assert argv[argv.index("--kv-bits") + 1] == "8"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0)
        reply = client.chat.completions.create(
            model=tiny_model.name, max_tokens=8, temperature=0, messages=[{"role": "user", "content": "hello"}]
        )
        assert reply.choices[0].message.content is not None and reply.usage is not None
        assert reply.usage.completion_tokens > 0
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0
