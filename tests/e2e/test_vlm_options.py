"""End to end: mlx-vlm's start-up options, planned by `serve start`, reach the real mlx-vlm worker's own config.

The evidence is what mlx_vlm itself holds once its CLI has read the worker's argv: the wrapped entry logs
``runtime.config`` (and the thinking budget its requests default to) as mlx_vlm captured it before listening
(``mlx_vlm_server.settings_line``), and the worker behaves by it: a TurboQuant KV cache serves a chat, and
``--max-kv-size`` cuts a reply where the prompt and the reply fill the cache, an mlx-vlm LoRA adapter changes
the greedy reply, and a changed adapter file stops the next load before mlx_vlm reads it. What the defaults are,
and the reply without an adapter, are read off the session's ``plain_vlm`` (served with no option, shared with
tests/e2e/test_vlm_prefix_cache.py); each option is start-up configuration, so each test serves its own.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion

from mlx_agent.runtime.entries.mlx_vlm_server import SETTINGS_LINE
from tests.adapter_support import flip_last_byte, restart_refusal
from tests.conftest import Agent, free_port
from tests.e2e.vision_support import ServedVlm

pytestmark = pytest.mark.e2e


@contextmanager
def launched(agent: Agent, model: Path, *options: str) -> Iterator[tuple[openai.OpenAI, dict[str, Any]]]:
    """Serve ``model`` with mlx-vlm and ``options``; yield a client and the receipt, then stop."""
    port = free_port()
    receipt = agent.launch("--path", str(model), "--runtime", "mlx-vlm", "--port", str(port), *options)
    try:
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0), receipt
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def logged_settings(receipt: dict[str, Any]) -> dict[str, Any]:
    """Return the settings line the worker of ``receipt`` logged at start (one, per load)."""
    log = Path(receipt["plan"]["models"][0]["worker"]["log_path"]).read_text(errors="replace")
    lines = [line for line in log.splitlines() if line.startswith(SETTINGS_LINE)]
    assert len(lines) == 1, log[-3000:]
    settings: dict[str, Any] = json.loads(lines[0][len(SETTINGS_LINE) :])
    return settings


@contextmanager
def served(agent: Agent, model: Path, *options: str) -> Iterator[tuple[openai.OpenAI, dict[str, Any]]]:
    """Serve ``model`` with mlx-vlm and ``options``; yield a client and the worker's logged settings, then stop."""
    with launched(agent, model, *options) as (client, receipt):
        yield client, logged_settings(receipt)


def chat(client: openai.OpenAI, model: Path, max_tokens: int) -> ChatCompletion:
    """Return the greedy reply to a short chat asking for at most ``max_tokens``."""
    return client.chat.completions.create(
        model=model.name, max_tokens=max_tokens, temperature=0, messages=[{"role": "user", "content": "hello"}]
    )


def test_the_options_reach_mlx_vlms_own_config_and_a_turboquant_cache_serves(
    agent: Agent, tiny_vlm: Path, plain_vlm: ServedVlm
) -> None:
    """--kv-bits 3.5, --thinking-budget 7 and --vision-cache-size 3 are what mlx_vlm runs with; a chat is answered."""
    plain = logged_settings(plain_vlm.receipt)  # the shared default server's, loaded once
    options = ("--kv-bits", "3.5", "--thinking-budget", "7", "--vision-cache-size", "3")
    with served(agent, tiny_vlm, *options) as (client, settings):
        assert chat(client, tiny_vlm, 4).choices[0].message.content
    expected = {"kv_bits": 3.5, "kv_quant_scheme": "turboquant", "thinking_budget": 7, "vision_cache_size": 3}
    assert {key: settings[key] for key in expected} == expected
    assert {key: plain[key] for key in expected} == {
        "kv_bits": None,
        "kv_quant_scheme": "uniform",
        "thinking_budget": None,
        "vision_cache_size": 20,
    }


def test_max_kv_size_cuts_a_reply_where_the_cache_is_full(agent: Agent, tiny_vlm: Path) -> None:
    """Under --max-kv-size 64 a greedy reply asked for 200 tokens stops at length with 64 tokens in all."""
    with served(agent, tiny_vlm, "--max-kv-size", "64") as (client, settings):
        reply = chat(client, tiny_vlm, 200)
    assert settings["max_kv_size"] == 64
    assert reply.usage is not None and reply.choices[0].finish_reason == "length"
    assert reply.usage.prompt_tokens + reply.usage.completion_tokens == 64


def test_an_mlx_vlm_adapter_is_loaded_and_a_changed_one_is_refused_at_load(
    agent: Agent, tiny_vlm: Path, tiny_vlm_adapter: Path, plain_vlm: ServedVlm, tmp_path: Path
) -> None:
    """The bound adapter is the one mlx_vlm preloads and changes the greedy reply; one flipped byte stops a load."""
    adapter = tmp_path / "adapter"
    shutil.copytree(tiny_vlm_adapter, adapter)
    plain = chat(plain_vlm.client(), tiny_vlm, 8).choices[0].message.content  # the shared default server's
    with launched(agent, tiny_vlm, "--adapter-path", str(adapter)) as (client, receipt):
        adapted = chat(client, tiny_vlm, 8).choices[0].message.content
    assert logged_settings(receipt)["adapter_path"] == str(adapter)
    assert adapted and plain and adapted != plain
    bound = [check["path"] for check in receipt["plan"]["models"][0]["file_checks"]]
    assert bound == [str(adapter / "adapter_config.json"), str(adapter / "adapters.safetensors")]
    flip_last_byte(adapter / "adapters.safetensors")
    assert restart_refusal(receipt, tmp_path / "restart.log") == (3, "adapter_changed")


def test_a_bound_draft_model_is_loaded_by_mlx_vlm_as_the_named_family(agent: Agent, tiny_vlm: Path) -> None:
    """--draft-model and --draft-kind are what mlx_vlm's config holds, and mlx_vlm loads and accepts the drafter.

    The tiny model drafts for itself (mlx_vlm checks the pair and enables speculative decoding); no tiny model
    here is a real drafter, so no reply is asked for: a Qwen2-VL model returns no hidden states to draft from.
    """
    with launched(agent, tiny_vlm, "--draft-model", str(tiny_vlm), "--draft-kind", "mtp") as (_, receipt):
        settings = logged_settings(receipt)
        log = Path(receipt["plan"]["models"][0]["worker"]["log_path"]).read_text(errors="replace")
    assert (settings["draft_model"], settings["draft_kind"]) == (str(tiny_vlm), "mtp")
    assert f"Loading speculative drafter (mtp): {tiny_vlm}" in log
    assert "Drafter ready; speculative decoding enabled." in log


def test_a_drafter_mlx_vlm_would_drop_fails_the_load(agent: Agent, tiny_vlm: Path, tmp_path: Path) -> None:
    """A drafter of another width (same vocabulary, so the plan binds it) is refused at load: draft_model_mismatch.

    mlx_vlm itself would log a warning and serve without drafting; the worker fails its load instead.
    """
    from tests.fixtures.tiny_vlm import build_tiny_vlm

    wide = build_tiny_vlm(tmp_path / "wide", seed=5, hidden_size=96)
    args = ["--path", str(tiny_vlm), "--runtime", "mlx-vlm", "--port", str(free_port())]
    args += ["--draft-model", str(wide), "--draft-kind", "mtp"]
    refused = agent.run("serve", "start", *args, "--confirm", "--preview-hash", agent.preview_hash(*args))
    assert (refused.rc, refused.code) == (1, "draft_model_mismatch"), refused.stdout
    assert "dropped the draft model" in refused.doc["error"]["message"]
