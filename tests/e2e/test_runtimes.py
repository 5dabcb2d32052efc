"""End to end: mlx-vlm chosen by --runtime auto, --thinking off, and executables from other environments, for real."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest

from mlx_agent.plan.runtime import NATIVE_ENTRY
from mlx_agent.runtime.entries.native_entry import KEY_ENV, PORT_ENV
from tests.conftest import Agent, free_port
from tests.media_traps import png

pytestmark = pytest.mark.e2e

THINKING_SWITCH = (
    "{%- if add_generation_prompt and enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
)


def test_auto_serves_a_vision_model_with_mlx_vlm(agent: Agent, tiny_vlm: Path) -> None:
    """Runtime auto reads vision_config, runs mlx_vlm's server on a private socket (no port), answers an image."""
    port = free_port()
    receipt = agent.launch("--path", str(tiny_vlm), "--runtime", "auto", "--port", str(port))
    model = receipt["plan"]["models"][0]
    assert model["runtime"]["name"] == "mlx-vlm" and "vision_config" in model["runtime_reason"]
    worker = model["worker"]["argv"]
    assert worker[1:4] == ["-m", "mlx_agent.runtime", "mlx-vlm"] and model["worker"]["transport"] == "unix"
    assert "--port" not in worker and "--host" not in worker and "{socket}" in worker
    assert any(name.startswith("mlx_vlm/server/") for name in model["runtime"]["runtime_sources"])
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local")
    reply = client.chat.completions.create(
        model=str(tiny_vlm),
        max_tokens=6,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What colour?"},
                    {"type": "image_url", "image_url": {"url": png()}},
                ],
            }
        ],
    )
    assert reply.choices[0].message.content
    server = agent.run("serve", "status").data["servers"][0]
    assert (server["state"], server["health"], server["runtime"]) == ("running", "ok", "mlx-vlm")
    assert agent.run("serve", "stop", "--port", str(port)).data["result"] == "stopped"


def test_thinking_off_reaches_the_template(agent: Agent, model_copy: Path) -> None:
    """With a template that reads enable_thinking, --thinking on and off render different prompts.

    mlx_lm itself passes enable_thinking=<does the vocabulary have think tokens> when the server is given
    no value, so the comparison is on versus off rather than default versus off.
    """
    config_path = model_copy / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] += THINKING_SWITCH
    config_path.write_text(json.dumps(config))
    messages = [{"role": "user", "content": "hello there"}]
    prompt_tokens = {}
    for thinking in ("on", "off"):
        port = free_port()
        receipt = agent.launch("--path", str(model_copy), "--port", str(port), "--thinking", thinking)
        assert receipt["plan"]["models"][0]["thinking"] == thinking
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local")
        reply = client.chat.completions.create(model="default_model", max_tokens=1, messages=messages)  # type: ignore[arg-type]
        assert reply.usage is not None
        prompt_tokens[thinking] = reply.usage.prompt_tokens
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0
    assert prompt_tokens["off"] > prompt_tokens["on"], "off renders the empty think block into the prompt"


def worker_of(agent: Agent) -> tuple[psutil.Process, str]:
    """Return the loaded worker process of the only server, and the loopback port it listens on."""
    worker = agent.run("serve", "status").data["servers"][0]["models"][0]["worker"]
    assert worker["transport"] == "tcp"
    return psutil.Process(worker["pid"]), worker["address"]


def ask(url: str, key: str | None = None, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """Send one request straight to a worker (GET, or POST ``body``), with or without a key: its status and JSON."""
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def test_runtime_executable_runs_its_native_argv(agent: Agent, tiny_model: Path) -> None:
    """An executable runtime (here this environment's own mlx_lm.server script) runs with its native argv.

    It runs under its own interpreter and our stdlib-only native entry, which gives it its port. Its /health
    answers before the model loads, so readiness is a one-token chat request instead.
    """
    exe = Path(sys.executable).parent / "mlx_lm.server"
    port = free_port()
    receipt = agent.launch("--path", str(tiny_model), "--port", str(port), "--runtime-executable", str(exe))
    model = receipt["plan"]["models"][0]
    assert model["runtime"]["launcher"] == "native" and model["runtime"]["adapter_enabled"] is False
    worker = model["worker"]["argv"]
    assert worker[:3] == [sys.executable, str(NATIVE_ENTRY), str(exe.resolve())] and "mlx_agent.runtime" not in worker
    assert worker[3:7] == ["--model", str(tiny_model), "--host", "127.0.0.1"] and "--port" not in worker
    assert model["worker"]["readiness"]["path"] == "/v1/chat/completions"
    server = agent.run("serve", "status").data["servers"][0]
    assert (server["state"], server["health"]) == ("running", "ok")
    assert agent.run("serve", "stop", "--port", str(port)).data["result"] == "stopped"


def test_a_native_mlx_lm_worker_answers_only_its_front(agent: Agent, tiny_model: Path) -> None:
    """An mlx_lm executable listens on a loopback port, but answers only the per-launch key its front sends."""
    exe = Path(sys.executable).parent / "mlx_lm.server"
    port = free_port()
    receipt = agent.launch("--path", str(tiny_model), "--port", str(port), "--runtime-executable", str(exe))
    assert receipt["plan"]["models"][0]["worker"]["secret_env"] == KEY_ENV
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0)
        messages: list[dict[str, str]] = [{"role": "user", "content": "hello"}]
        reply = client.chat.completions.create(model="default_model", max_tokens=2, messages=messages)  # type: ignore[arg-type]
        assert reply.choices[0].message.content is not None
        proc, worker_port = worker_of(agent)
        argv = proc.cmdline()
        key = proc.environ()[KEY_ENV]  # its start-up environment (0400 in /proc); the entry dropped it from os.environ
        assert len(key) >= 32 and not any(key in word or worker_port in word for word in argv)
        assert "--port" not in argv and proc.environ()[PORT_ENV] == worker_port
        chat = f"http://127.0.0.1:{worker_port}/v1/chat/completions"
        body = {"messages": messages, "max_tokens": 1}
        for url, sent in ((chat, body), (f"http://127.0.0.1:{worker_port}/health", None)):
            status, refused = ask(url, body=sent)
            assert (status, refused["error"]["code"]) == (401, "invalid_api_key"), refused
            assert ask(url, key="not-the-key", body=sent)[0] == 401
        status, answer = ask(chat, key=key, body=body)
        assert status == 200 and answer["choices"], answer
        again = client.chat.completions.create(model="default_model", max_tokens=2, messages=messages)  # type: ignore[arg-type]
        assert again.choices[0].message.content is not None  # the front keeps its worker
        assert worker_of(agent)[0].pid == proc.pid
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def test_a_native_mlx_vlm_worker_answers_only_its_front(agent: Agent, tiny_vlm: Path) -> None:
    """An mlx-vlm executable listens on a loopback port, but answers only the per-launch key its front sends."""
    exe = Path(sys.executable).parent / "mlx_vlm.server"
    port = free_port()
    receipt = agent.launch(
        "--path", str(tiny_vlm), "--port", str(port), "--runtime", "mlx-vlm", "--runtime-executable", str(exe)
    )
    model = receipt["plan"]["models"][0]
    assert model["worker"]["transport"] == "tcp" and model["worker"]["secret_env"] == "MLX_VLM_SERVER_API_KEY"
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0)
        reply = client.chat.completions.create(
            model=str(tiny_vlm), max_tokens=4, messages=[{"role": "user", "content": "hello"}]
        )
        assert reply.choices[0].message.content is not None
        proc, worker_port = worker_of(agent)
        argv = proc.cmdline()
        assert argv[:3] == [sys.executable, str(NATIVE_ENTRY), str(exe.resolve())] and "--port" not in argv
        key = proc.environ()["MLX_VLM_SERVER_API_KEY"]  # in its environment (0400 in /proc), not in its argv
        assert len(key) >= 32 and not any(key in word for word in argv)
        health = f"http://127.0.0.1:{worker_port}/health"
        assert ask(health)[0] == 401
        assert ask(health, key=key)[0] == 200
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0
