"""End to end: mlx-vlm chosen by --runtime auto for a tiny vision model, and --thinking off for real."""

from __future__ import annotations

import base64
import json
import struct
import sys
import zlib
from pathlib import Path

import openai
import pytest

from tests.conftest import Agent, free_port
from tests.fixtures.tiny_vlm import build_tiny_vlm

pytestmark = pytest.mark.e2e

THINKING_SWITCH = (
    "{%- if add_generation_prompt and enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one tiny random-weight Qwen2-VL model for this module."""
    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-qwen2-vl")


def png(width: int = 32, height: int = 24) -> str:
    """Return a small solid-red PNG as a data URL."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    body = (
        chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + body).decode()


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


def test_runtime_executable_runs_its_native_argv(agent: Agent, tiny_model: Path) -> None:
    """An executable runtime (here this environment's own mlx_lm.server script) runs with its native argv.

    Its /health answers before the model loads, so readiness is a one-token chat request instead.
    """
    exe = Path(sys.executable).parent / "mlx_lm.server"
    port = free_port()
    receipt = agent.launch("--path", str(tiny_model), "--port", str(port), "--runtime-executable", str(exe))
    model = receipt["plan"]["models"][0]
    assert model["runtime"]["launcher"] == "native" and model["runtime"]["adapter_enabled"] is False
    worker = model["worker"]["argv"]
    assert worker[0] == str(exe.resolve()) and "mlx_agent.runtime" not in worker
    assert model["worker"]["readiness"]["path"] == "/v1/chat/completions"
    server = agent.run("serve", "status").data["servers"][0]
    assert (server["state"], server["health"]) == ("running", "ok")
    assert agent.run("serve", "stop", "--port", str(port)).data["result"] == "stopped"


def test_a_native_mlx_vlm_worker_answers_only_its_front(agent: Agent, tiny_vlm: Path) -> None:
    """An mlx-vlm executable listens on a loopback port, but answers only the per-launch key its front sends."""
    import urllib.error
    import urllib.request

    import psutil

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
        worker = next(
            p for p in psutil.process_iter(["cmdline"]) if str(exe.resolve()) in (p.info["cmdline"] or [])[:2]
        )
        argv = worker.info["cmdline"]
        worker_port = argv[argv.index("--port") + 1]
        key = worker.environ()["MLX_VLM_SERVER_API_KEY"]  # in its environment (0400 in /proc), not in its argv
        assert len(key) >= 32 and not any(key in word for word in argv)
        health = f"http://127.0.0.1:{worker_port}/health"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(health, timeout=10)
        assert refused.value.code == 401
        keyed = urllib.request.Request(health, headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(keyed, timeout=10) as answer:
            assert answer.status == 200
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0
