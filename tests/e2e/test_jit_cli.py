"""`serve start --jit` through the CLI: a gateway that loads the tiny model on request, unloads, and stops."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import openai
import psutil
import pytest

from tests.conftest import Agent, assert_valid, free_port

pytestmark = pytest.mark.e2e


def test_jit_lifecycle(agent: Agent, tiny_model: Path) -> None:
    """Preview, confirm, unloaded until asked, loaded by a chat, unloaded by hand, policy replaced, stopped."""
    port = free_port()
    args = ["--path", str(tiny_model), "--port", str(port), "--jit", "--idle-timeout", "600"]
    preview = agent.run("serve", "start", *args)
    assert preview.rc == 0, preview.stdout
    plan = preview.data["plan"]
    assert_valid("serve_plan", plan)
    assert plan["argv"][1:3] == ["-m", "mlx_agent.gateway"] and plan["front"]["mode"] == "jit"
    model = plan["models"][0]
    assert "{socket}" in model["worker"]["argv"] and model["worker"]["transport"] == "unix"
    assert model["policy"] == {"idle_timeout": 600, "keep_loaded": False, "preload": False}
    assert plan["front"]["min_headroom_gb"] is None and model["weight_bytes"] > 0
    started = agent.run("serve", "start", *args, "--confirm", "--preview-hash", plan["preview_hash"])
    assert started.rc == 0, started.stdout + started.stderr
    receipt = started.data["receipt"]
    gateway_pid = receipt["pid"]
    token = Path(plan["front"]["token_path"])
    assert stat.S_IMODE(token.stat().st_mode) == 0o600

    server = agent.run("serve", "status").data["servers"][0]
    assert (server["state"], server["mode"], server["model_state"]) == ("running", "jit", "unloaded")

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local")
    assert [m.id for m in client.models.list().data]
    reply = client.chat.completions.create(
        model="default_model", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content is not None
    server = agent.run("serve", "status").data["servers"][0]
    assert server["model_state"] == "loaded" and server["loads"] == 1
    worker_pid = server["worker"]["pid"]

    wrong = agent.run("serve", "unload", "--port", str(port), "--expected-pid", str(gateway_pid + 100000))
    assert (wrong.rc, wrong.code) == (1, "expected_pid_mismatch")
    unloaded = agent.run("serve", "unload", "--port", str(port), "--expected-pid", str(gateway_pid))
    assert unloaded.rc == 0, unloaded.stdout
    assert agent.run("serve", "status").data["servers"][0]["model_state"] == "unloaded"
    assert not psutil.pid_exists(worker_pid) or psutil.Process(worker_pid).status() == psutil.STATUS_ZOMBIE

    replaced = agent.run(
        "serve",
        "policy",
        "--port",
        str(port),
        "--expected-pid",
        str(gateway_pid),
        "--keep-loaded",
        "--min-headroom-gb",
        "0.5",
    )
    assert replaced.rc == 0, replaced.stdout
    policy_path = Path(plan["front"]["policy_path"])
    saved = json.loads(policy_path.read_text())
    assert (saved["min_headroom_gb"], saved["models"]) == (
        0.5,
        {model["served_model_name"]: {"idle_timeout": 0, "keep_loaded": True}},
    )
    assert stat.S_IMODE(policy_path.stat().st_mode) == 0o600
    assert agent.run("serve", "status").data["servers"][0]["policy"]["keep_loaded"] is True

    stop = agent.run("serve", "stop", "--port", str(port))
    assert (stop.rc, stop.data["result"]) == (0, "stopped")
    assert not token.exists() and not policy_path.exists()  # the front's private files go with it
    assert not psutil.pid_exists(gateway_pid) or psutil.Process(gateway_pid).status() == psutil.STATUS_ZOMBIE


def test_jit_refusals(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """JIT cannot be a launchd unit, idle flags need --jit, keys must be private, unload needs a receipt."""
    base = ["serve", "start", "--path", str(tiny_model), "--port", str(free_port())]
    keys = tmp_path / "keys"
    keys.write_text("secret\n")
    keys.chmod(0o644)
    assert agent.run(*base, "--jit", "--api-key-file", str(keys)).code == "invalid_arguments"
    keys.chmod(0o600)
    assert agent.run(*base, "--jit", "--api-key-file", str(keys)).rc == 0
    assert agent.run(*base, "--jit", "--launchd").code == "launchd_jit_unsupported"
    assert agent.run(*base, "--jit", "--systemd").code == "launchd_jit_unsupported"
    assert agent.run(*base, "--idle-timeout", "5").code == "invalid_arguments"
    assert agent.run("serve", "unload", "--port", str(free_port()), "--expected-pid", "1").code == "receipt_not_found"
