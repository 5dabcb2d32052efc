"""End to end: a JIT worker's prompt cache outlives an unload and a restart, and only for the same identity."""

from __future__ import annotations

import json
import time
from pathlib import Path

import openai
import pytest

from tests.conftest import Agent, free_port

pytestmark = pytest.mark.e2e

CONVERSATION = [
    {"role": "user", "content": "Here is a long file to keep in mind: " + " ".join(f"line{i}" for i in range(150))},
]


def turn(port: int, model: str, messages: list[dict[str, str]]) -> tuple[str, int]:
    """Send one greedy chat turn; return the reply and the prompt tokens the worker had cached."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", timeout=120, max_retries=0)
    reply = client.chat.completions.create(model=model, max_tokens=8, temperature=0, messages=messages)  # type: ignore[arg-type]
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    return reply.choices[0].message.content or "", reply.usage.prompt_tokens_details.cached_tokens or 0


def test_the_prompt_cache_survives_an_unload_for_the_same_model_only(agent: Agent, model_copy: Path) -> None:
    """After an unload or a restart the next turn reuses the saved cache; a changed model never restores it."""
    port = free_port()
    receipt = agent.launch("--path", str(model_copy), "--port", str(port), "--jit")
    record = receipt["plan"]["models"][0]["prompt_cache"]
    assert record is not None and Path(record["root"]).parent == agent.home
    first, cached = turn(port, model_copy.name, CONVERSATION)
    assert cached == 0
    following = [*CONVERSATION, {"role": "assistant", "content": first}, {"role": "user", "content": "and then?"}]
    unloaded = agent.run("serve", "unload", "--port", str(port), "--expected-pid", str(receipt["pid"]))
    assert unloaded.rc == 0, unloaded.stdout
    deadline = time.monotonic() + 30  # the worker saves while it stops, after unload has answered
    while (kept := agent.run("serve", "status").data["servers"][0]["models"][0]["prompt_cache"])["entries"] < 1:
        assert time.monotonic() < deadline, "the unloaded worker saved no prompt cache"
        time.sleep(0.2)
    assert kept["bytes"] > 0 and kept["disk_gb"] == 4.0
    _, cached = turn(port, model_copy.name, following)
    assert cached >= 150, "the reloaded worker restored the conversation's cache"
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0

    port = free_port()  # a restart of the same reviewed model restores it too
    agent.launch("--path", str(model_copy), "--port", str(port), "--jit")
    _, cached = turn(port, model_copy.name, following)
    assert cached >= 150, "the restarted server restored the conversation's cache"
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0

    config = json.loads((model_copy / "config.json").read_text())
    (model_copy / "config.json").write_text(json.dumps({**config, "mlx_agent_note": "another model now"}))
    port = free_port()
    agent.launch("--path", str(model_copy), "--port", str(port), "--jit")
    _, cached = turn(port, model_copy.name, following)
    assert cached == 0, "a changed identity starts without the saved cache"
    now = agent.run("serve", "status").data["servers"][0]["models"][0]["prompt_cache"]
    assert now["dir"] != kept["dir"] and Path(kept["dir"]).is_dir()  # another directory; the old one kept
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0
