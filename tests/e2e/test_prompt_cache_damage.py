"""End to end: a damaged, relabelled or foreign kept prompt-cache entry never stops a worker's start.

Each test plants entries where the real worker of the tiny model restores from, then starts the server with a
--ready-timeout of 30 s: without the checks, the restore raised in the worker's main thread while mlx_lm's
generation thread kept the process up, and the start failed only at that timeout.
"""

from __future__ import annotations

import json
import os
import struct
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import openai
import pytest

from mlx_agent.kept_cache import cache_dir
from mlx_agent.plan.front import model_config
from mlx_agent.runtime.serving.cache_entry_check import entry_name
from mlx_agent.runtime.serving.prompt_cache import AlignedPromptCache, save_entries
from mlx_agent.wire import PROMPT_CACHE_QUARANTINE
from tests.conftest import Agent, free_port

pytestmark = pytest.mark.e2e

READY_TIMEOUT = "30"  # well under the 120 s default, and above the tiny model's start on this machine


def plant_entry(agent: Agent, model: Path, args: list[str], tokens: list[int]) -> Path:
    """Save one real entry of ``model`` caching ``tokens`` where the plan's worker restores from; return it."""
    from mlx_lm import load
    from mlx_lm.models.cache import make_prompt_cache

    preview = agent.run("serve", "start", *args)
    assert preview.rc == 0, preview.stdout
    directory = cache_dir(model_config(preview.data["plan"]["models"][0]))
    assert directory is not None
    loaded = cast("tuple[Any, Any]", load(str(model)))
    cache = make_prompt_cache(loaded[0])
    loaded[0](mx.array([tokens]), cache=cache)
    store = AlignedPromptCache(max_size=2)
    store.insert_cache("m", tokens, cache)
    assert save_entries(store, "m", store.held_keys("m"), directory, directory.name).saved == 1
    return directory / entry_name(tokens)


def answers(port: int, model: str, content: str = "hello there") -> int:
    """Send one greedy chat turn and return the prompt tokens the worker had cached."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", timeout=120, max_retries=0)
    reply = client.chat.completions.create(
        model=model, max_tokens=4, temperature=0, messages=[{"role": "user", "content": content}]
    )
    assert reply.choices[0].message.content is not None and reply.usage is not None
    details = reply.usage.prompt_tokens_details
    return (details.cached_tokens or 0) if details is not None else 0


def loaded_file(path: Path) -> tuple[dict[str, mx.array], dict[str, str]]:
    """Return the arrays and metadata of a saved entry."""
    return cast("tuple[dict[str, mx.array], dict[str, str]]", mx.load(str(path), return_metadata=True))


def wrong_shape(path: Path) -> Path:
    """Rewrite the entry with keys of one head dim fewer, its label left valid: only the layout check can tell."""
    arrays, meta = loaded_file(path)
    arrays = {k: v[..., :-1] if v.ndim == 4 else v for k, v in arrays.items()}
    mx.save_safetensors(str(path), arrays, meta)
    return path


def relabelled(path: Path) -> Path:
    """Relabel the entry with another prompt's token ids (same length) under that prompt's file name."""
    arrays, meta = loaded_file(path)
    tokens = json.loads(meta["0.tokens"])
    other = [*tokens[:-1], tokens[-1] + 1]
    target = path.with_name(entry_name(other))
    mx.save_safetensors(str(target), arrays, {**meta, "0.tokens": json.dumps(other)})
    path.unlink()
    return target


def overwrite(data: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    """Return a damage that replaces the entry's bytes with ``data`` of them."""

    def damage(path: Path) -> Path:
        path.write_bytes(data(path.read_bytes()))
        return path

    return damage


DAMAGES = {
    "truncated": overwrite(lambda raw: raw[: len(raw) // 2]),
    "empty": overwrite(lambda raw: b""),
    "garbage": overwrite(lambda raw: bytes(range(256)) * (len(raw) // 256 + 1)),
    "huge-header-length": overwrite(lambda raw: struct.pack("<Q", 2**40) + raw[8:]),
    "wrong-shape": wrong_shape,
    "relabelled-tokens": relabelled,
}


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_a_damaged_entry_is_quarantined_and_the_server_starts(agent: Agent, model_copy: Path, kind: str) -> None:
    """The server is ready within 30 s and answers; the entry is moved aside, logged and counted, a good one kept."""
    port = free_port()
    args = ["--path", str(model_copy), "--port", str(port), "--ready-timeout", READY_TIMEOUT]
    good = plant_entry(agent, model_copy, args, list(range(5, 25)))
    bad = DAMAGES[kind](plant_entry(agent, model_copy, args, list(range(30, 70))))
    receipt = agent.launch(*args)  # eager: confirm waits for the worker, which restores before it listens
    answers(port, model_copy.name)
    kept = agent.run("serve", "status").data["servers"][0]["models"][0]["prompt_cache"]
    assert (kept["entries"], kept["quarantined"], kept["refused"]) == (1, 1, None), kept
    assert good.is_file() and not bad.exists() and (bad.parent / PROMPT_CACHE_QUARANTINE / bad.name).is_file()
    log = Path(receipt["plan"]["models"][0]["worker"]["log_path"]).read_text()
    assert f"quarantined the saved prompt cache {bad.name}" in log
    assert "restored 1 saved prompt cache entries (1 quarantined)" in log
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as reply:
        metrics = reply.read().decode()
    assert f'mlx_agent_prompt_cache_quarantined{{model="{model_copy.name}"}} 1.0' in metrics
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def test_a_damaged_entry_does_not_fail_jit_loads(agent: Agent, model_copy: Path) -> None:
    """Under JIT the first request loads a worker past a garbage entry and gets its answer, not 503 load_failed."""
    port = free_port()
    args = ["--path", str(model_copy), "--port", str(port), "--jit", "--ready-timeout", READY_TIMEOUT]
    bad = DAMAGES["garbage"](plant_entry(agent, model_copy, args, list(range(5, 25))))
    agent.launch(*args)
    answers(port, model_copy.name)
    answers(port, model_copy.name)  # the same worker keeps answering
    kept = agent.run("serve", "status").data["servers"][0]["models"][0]["prompt_cache"]
    assert (kept["entries"], kept["quarantined"]) == (0, 1) and not bad.exists()
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def test_a_directory_others_can_write_is_not_restored_and_the_server_starts(agent: Agent, model_copy: Path) -> None:
    """A 0777 kept-cache directory is refused for restore and save, status says why, and the server answers."""
    port = free_port()
    args = ["--path", str(model_copy), "--port", str(port), "--ready-timeout", READY_TIMEOUT]
    entry = plant_entry(agent, model_copy, args, list(range(5, 25)))
    os.chmod(entry.parent, 0o777)
    receipt = agent.launch(*args)
    assert answers(port, model_copy.name) == 0
    kept = agent.run("serve", "status").data["servers"][0]["models"][0]["prompt_cache"]
    assert kept["quarantined"] == 0 and "writable by group or others" in kept["refused"], kept
    assert entry.is_file() and not (entry.parent / PROMPT_CACHE_QUARANTINE).exists()  # untouched: not ours to move
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0
    log = Path(receipt["plan"]["models"][0]["worker"]["log_path"]).read_text()
    assert "starting without the kept prompt cache" in log and "not saving the prompt cache" in log
    assert sorted(p.name for p in entry.parent.iterdir()) == [entry.name]  # nothing saved into it either


def test_entries_of_a_drafted_quantized_worker_pass_the_checks(
    agent: Agent, model_copy: Path, tiny_draft: Path
) -> None:
    """What a worker with a draft model and KV bits saves (both models' layers) is restored after an unload."""
    port = free_port()
    args = ["--path", str(model_copy), "--port", str(port), "--jit", "--draft-model", str(tiny_draft)]
    receipt = agent.launch(*args, "--kv-bits", "8")
    long = "Keep this in mind: " + " ".join(f"line{i}" for i in range(150))
    assert answers(port, model_copy.name, long) == 0
    assert agent.run("serve", "unload", "--port", str(port), "--expected-pid", str(receipt["pid"])).rc == 0
    deadline = time.monotonic() + 30  # the worker saves while it stops, after unload has answered
    while agent.run("serve", "status").data["servers"][0]["models"][0]["prompt_cache"]["entries"] < 1:
        assert time.monotonic() < deadline, "the unloaded worker saved no prompt cache"
        time.sleep(0.2)
    assert answers(port, model_copy.name, long) >= 150, "the reloaded worker restored the saved entry"
    kept = agent.run("serve", "status").data["servers"][0]["models"][0]["prompt_cache"]
    assert kept["quarantined"] == 0 and kept["refused"] is None
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0
