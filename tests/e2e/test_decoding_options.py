"""End to end: a real mlx_lm worker with a draft model (speculative decoding) and with a quantized KV cache."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from tests.conftest import Agent, free_port
from tests.fixtures.tiny_model import build_tiny_model

pytestmark = pytest.mark.e2e

PROMPTS = ["def fibonacci(n):", "Write a list of colours:", "hello"]


@pytest.fixture(scope="module")
def tiny_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build a one-layer tiny model with the tiny model's tokenizer, to draft for it."""
    return build_tiny_model(tmp_path_factory.mktemp("draft") / "tiny-draft", seed=7, num_layers=1)


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


def test_a_draft_model_serves_the_same_greedy_replies(agent: Agent, tiny_model: Path, tiny_draft: Path) -> None:
    """Speculative decoding with a draft model changes speed, not the greedy text."""
    plain = replies(agent, tiny_model)
    drafted = replies(agent, tiny_model, "--draft-model", str(tiny_draft), "--num-draft-tokens", "3")
    assert drafted == plain


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
