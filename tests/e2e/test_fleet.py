"""One endpoint, many reviewed models: two tiny models of two architectures (llama, qwen2) behind one front.

Everything runs for real: the CLI previews and confirms a models file, the front routes by the request's
``model`` to real wrapped mlx_lm workers on their sockets, and the official SDKs talk to it. Which model
served a request is read from the front's own request lines (``serve logs --json``), not guessed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import LAUNCHER, Agent, assert_valid, free_port
from tests.fixtures.tiny_model import build_tiny_model
from tests.gateway_support import private_file

pytestmark = pytest.mark.e2e

MODELS = """\
[[model]]
name = "main"
path = "{llama}"
aliases = ["claude-sonnet-*", "claude-opus-*", "gpt-*"]
max_tokens = 8

[[model]]
name = "small"
path = "{qwen}"
aliases = ["claude-haiku-*"]
max_tokens = 8
max_tokens_ceiling = 1900
"""
HI: Any = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build a tiny random-weight qwen2 model (the fleet's second architecture)."""
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen2", model_type="qwen2")


@dataclass
class Fleet:
    """A confirmed fleet: its port, front pid, plan, models file and the CLI that started it."""

    agent: Agent
    port: int
    pid: int
    plan: dict[str, Any]
    models_file: Path

    @property
    def url(self) -> str:
        """Return the front's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def openai(self, key: str = "local") -> openai.OpenAI:
        """Return the official OpenAI client for the front."""
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    def anthropic(self) -> anthropic.Anthropic:
        """Return the official Anthropic client for the front."""
        return anthropic.Anthropic(base_url=self.url, api_key="local", max_retries=0)

    def status(self) -> dict[str, dict[str, Any]]:
        """Return ``serve status``'s models of this server by name."""
        server = self.agent.run("serve", "status", "--port", str(self.port)).data["servers"][0]
        return {m["name"]: m for m in server["models"]}

    def requests(self) -> list[dict[str, Any]]:
        """Return the front's request lines, as ``serve logs --json`` parses them."""
        logs = self.agent.run("serve", "logs", "--port", str(self.port), "--lines", "1000").data["logs"]
        front = next(log for log in logs if log["source"] == "front")
        requests: list[dict[str, Any]] = front["requests"]
        return requests


def write_models(directory: Path, llama: Path, qwen: Path, text: str = MODELS) -> Path:
    """Write the models file naming the two tiny models."""
    path = directory / "models.toml"
    path.write_text(text.format(llama=llama, qwen=qwen))
    return path


@pytest.fixture
def start(agent: Agent, tiny_model: Path, qwen_model: Path, tmp_path: Path) -> Iterator[Any]:
    """Return a function that previews and confirms the two-model fleet with extra options."""

    def launch(*options: str, text: str = MODELS) -> Fleet:
        models_file = write_models(tmp_path, tiny_model, qwen_model, text)
        port = free_port()
        receipt = agent.launch("--models", str(models_file), "--port", str(port), *options)
        return Fleet(agent, port, receipt["pid"], receipt["plan"], models_file)

    yield launch


def test_routing_by_name_and_alias_on_every_endpoint(start: Any) -> None:
    """Names and aliases reach their model on chat, completions, messages, count_tokens and responses."""
    fleet = start("--jit")
    assert [
        (m["id"], m["state"], m["aliases"])
        for m in json.loads(urllib.request.urlopen(f"{fleet.url}/v1/models").read())["data"]
    ] == [  # glob aliases are listed under their model, never as ids
        ("main", "unloaded", ["claude-sonnet-*", "claude-opus-*", "gpt-*"]),
        ("small", "unloaded", ["claude-haiku-*"]),
    ]
    oa, an = fleet.openai(), fleet.anthropic()
    assert oa.chat.completions.create(model="gpt-4o", messages=HI).model == "gpt-4o"
    assert oa.chat.completions.create(model="small", messages=HI, max_tokens=3).usage.completion_tokens == 3
    assert oa.completions.create(model="main", prompt="Once upon").choices[0].text is not None
    # Claude Code's main model and its small, fast one for background work:
    assert an.messages.create(model="claude-sonnet-4-6", max_tokens=4, messages=HI).model == ("claude-sonnet-4-6")
    assert an.messages.create(model="claude-haiku-4-5-20251001", max_tokens=4, messages=HI).content
    assert an.messages.count_tokens(model="claude-haiku-4-5", messages=HI).input_tokens > 0
    assert oa.responses.create(model="small", input="hi", max_output_tokens=4).status in ("completed", "incomplete")
    with pytest.raises(openai.NotFoundError) as missing:
        oa.chat.completions.create(model="llama-3", messages=HI)
    assert "main, claude-sonnet-*, claude-opus-*, gpt-*, small, claude-haiku-*" in str(missing.value)
    routed = [(r["endpoint"], r["model"], r["status"]) for r in fleet.requests() if r["endpoint"] != "/v1/models"]
    assert routed == [
        ("/v1/chat/completions", "main", 200),
        ("/v1/chat/completions", "small", 200),
        ("/v1/completions", "main", 200),
        ("/v1/messages", "main", 200),
        ("/v1/messages", "small", 200),
        ("/v1/messages/count_tokens", "small", 200),
        ("/v1/responses", "small", 200),
        ("/v1/chat/completions", None, 404),
    ]
    models = fleet.status()
    assert (models["main"]["loads"], models["small"]["loads"]) == (1, 1)
    assert {m["model_state"] for m in models.values()} == {"loaded"}
    # The plan's queue and stall defaults reach each model's front state (--max-queue 64, --stall-timeout 120).
    queue = {"waiting": 0, "running": 0, "slots": 32, "max_queue": 64, "queue_full": 0, "insufficient_memory": 0}
    assert all(m["queue"] == queue and m["stall"]["stall_timeout"] == 120 for m in models.values()), models


def test_concurrent_cold_requests_load_each_model_once(start: Any) -> None:
    """Eight concurrent cold requests for each of two models: every one is answered, one load per model."""
    fleet = start("--jit")
    client = fleet.openai()
    answers: list[Any] = []

    def ask(model: str) -> None:
        answers.append(client.chat.completions.create(model=model, messages=HI, max_tokens=2))

    threads = [threading.Thread(target=ask, args=(name,)) for name in ["main", "small"] * 8]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(answers) == 16
    models = fleet.status()
    assert (models["main"]["loads"], models["small"]["loads"]) == (1, 1)
    assert (models["main"]["evictions"], models["small"]["evictions"]) == (0, 0)


def test_one_slot_evicts_the_idle_model_and_never_a_streaming_one(start: Any) -> None:
    """With --max-loaded 1 a request for the other model evicts the idle one, but gets 503 while a stream is open."""
    fleet = start("--jit", "--max-loaded", "1")
    client = fleet.openai()
    client.chat.completions.create(model="main", messages=HI)
    client.chat.completions.create(model="small", messages=HI)  # main is idle: it is evicted
    models = fleet.status()
    assert (models["main"]["model_state"], models["main"]["evictions"], models["small"]["model_state"]) == (
        "unloaded",
        1,
        "loaded",
    )
    stream = client.chat.completions.create(model="small", messages=HI, max_tokens=1900, stream=True)
    first = next(iter(stream))
    assert first.choices[0].delta is not None
    with pytest.raises(openai.InternalServerError) as refused:
        client.chat.completions.create(model="main", messages=HI)
    body: Any = refused.value.body  # the SDK hands over the error object itself
    error = body.get("error", body)
    assert refused.value.status_code == 503 and error["code"] == "too_many_loaded"
    assert error["held_by"][0]["name"] == "small" and error["held_by"][0]["open_streams"] == 1
    finish = [chunk.choices[0].finish_reason for chunk in stream if chunk.choices]
    assert finish[-1] == "length"  # the stream ran to its end
    client.chat.completions.create(model="main", messages=HI)  # small is idle again: now it goes
    models = fleet.status()
    assert (models["small"]["evictions"], models["main"]["model_state"], models["main"]["loads"]) == (1, "loaded", 2)


def test_metrics_are_prometheus_text(start: Any, tmp_path: Path) -> None:
    """/metrics needs a key when the plan has keys, and a real Prometheus parser reads per-model series from it."""
    keys = private_file(tmp_path / "keys", "k-1\n")
    fleet = start("--jit", "--api-key-file", str(keys))
    client = fleet.openai("k-1")
    client.chat.completions.create(model="main", messages=HI)
    for _ in client.chat.completions.create(model="small", messages=HI, stream=True):
        pass
    request = urllib.request.Request(f"{fleet.url}/metrics")
    with pytest.raises(urllib.error.HTTPError) as locked:
        urllib.request.urlopen(request)
    assert locked.value.code == 401
    request.add_header("Authorization", "Bearer k-1")
    with urllib.request.urlopen(request) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("mlx_agent_requests_total", model="main", endpoint="/v1/chat/completions", status="200") == 1
    assert value("mlx_agent_completion_tokens_total", model="small") == 8
    assert value("mlx_agent_prompt_tokens_total", model="main") > 0
    assert value("mlx_agent_time_to_first_token_seconds_count", model="small") == 1
    assert value("mlx_agent_tokens_per_second_count", model="small") == 1
    assert value("mlx_agent_loads_total", model="main") == value("mlx_agent_loads_total", model="small") == 1
    assert value("mlx_agent_load_seconds_count", model="main") == 1
    assert value("mlx_agent_evictions_total", model="main") == 0
    assert value("mlx_agent_open_streams", model="small") == 0
    assert value("mlx_agent_model_loaded", model="small") == 1


def test_logs_follow_sees_a_new_request_line(start: Any) -> None:
    """``serve logs --follow --json`` prints a request line for a request made while it runs (no prompt text)."""
    fleet = start("--jit")
    agent = fleet.agent
    follower = subprocess.Popen(
        [sys.executable, str(LAUNCHER), "serve", "logs", "--port", str(fleet.port), "--follow", "--json"],
        stdout=subprocess.PIPE,
        text=True,
        env=agent.env,
    )
    try:
        time.sleep(1.0)
        fleet.openai().chat.completions.create(model="claude-haiku-9", messages=[{"role": "user", "content": "secret"}])
        deadline = time.monotonic() + 30
        seen = None
        assert follower.stdout is not None
        while time.monotonic() < deadline and seen is None:
            doc = json.loads(follower.stdout.readline())
            request = doc.get("request")
            if request and request["endpoint"] == "/v1/chat/completions":
                seen = (doc, request)
        assert seen is not None
        doc, request = seen
        assert (request["model"], request["status"], request["completion_tokens"]) == ("small", 200, 8)
        assert request["duration_ms"] > 0 and "prompt" not in request and "secret" not in doc["line"]
    finally:
        follower.terminate()
        follower.wait(10)
    only_small = agent.run("serve", "logs", "--port", str(fleet.port), "--model", "small").data["logs"]
    assert [log["source"] for log in only_small] == ["front", "small"]
    assert agent.run("serve", "logs", "--port", str(fleet.port), "--model", "nope").code == "invalid_arguments"


def test_a_changed_file_is_refused_naming_the_model(
    agent: Agent, tiny_model: Path, qwen_model: Path, tmp_path: Path
) -> None:
    """Editing the models file after the preview makes confirm preview_stale, naming the model that changed."""
    path = write_models(tmp_path, tiny_model, qwen_model)
    args = ["serve", "start", "--models", str(path), "--port", str(free_port()), "--jit"]
    preview_hash = agent.preview_hash(*args[2:])
    path.write_text(path.read_text().replace("max_tokens_ceiling = 1900", "max_tokens_ceiling = 1000"))
    stale = agent.run(*args, "--confirm", "--preview-hash", preview_hash)
    assert (stale.rc, stale.code) == (1, "preview_stale")
    assert "(models: small)" in stale.doc["error"]["message"]
    changed = {c["field"]: c.get("model") for c in stale.doc["error"]["details"]["changes"]}
    assert changed["models[small].max_tokens_ceiling"] == "small" and "models_file.sha256" in changed


def test_an_eager_fleet_is_ready_with_both_and_controls_one(start: Any) -> None:
    """Without --jit both workers load at confirm; unload and policy act on the one model named."""
    fleet = start()
    models = fleet.status()
    assert {name: m["model_state"] for name, m in models.items()} == {"main": "loaded", "small": "loaded"}
    assert models["small"]["memory_estimate_bytes"] > models["small"]["weight_bytes"] > 0
    agent, port, pid = fleet.agent, str(fleet.port), str(fleet.pid)
    unloaded = agent.run("serve", "unload", "--port", port, "--expected-pid", pid, "--model", "claude-haiku-4")
    assert unloaded.rc == 0 and [m["name"] for m in unloaded.data["models"]] == ["small"]
    assert {n: m["model_state"] for n, m in fleet.status().items()} == {"main": "loaded", "small": "unloaded"}
    policy = agent.run(
        "serve", "policy", "--port", port, "--expected-pid", pid, "--model", "main", "--idle-timeout", "300"
    )
    assert policy.rc == 0 and policy.data["model"] == "main"
    models = fleet.status()
    assert models["main"]["policy"]["idle_timeout"] == 300 and models["main"]["policy"]["keep_loaded"] is False
    assert models["small"]["policy"]["keep_loaded"] is True  # the other model's policy is untouched
    assert agent.run("serve", "unload", "--port", port, "--expected-pid", pid, "--model", "x").code == (
        "invalid_arguments"
    )
    assert_valid("serve_plan", fleet.plan)


def test_an_eager_front_without_memory_for_its_models_reports_why(agent: Agent, tiny_model: Path) -> None:
    """An eager start whose model the memory reserve rules out fails with insufficient_headroom, not launch_failed."""
    args = ["--path", str(tiny_model), "--port", str(free_port()), "--min-headroom-gb", "100000"]
    preview_hash = agent.preview_hash(*args)
    started = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert (started.rc, started.code) == (1, "insufficient_headroom"), started.stdout
    details = started.doc["error"]["details"]
    assert details["memory_check"]["reserve_bytes"] == 100000 * 10**9 and details["held_by"] == []
    assert agent.run("serve", "status").data["servers"] == []
