"""A systemd unit's ExecStart line, run as written, starts a server that answers (Linux only)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from mlx_agent.supervise.readiness import probe
from tests.conftest import Agent, free_port
from tests.units_support import ODD_NAME, install, read_unit, systemd_words

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(sys.platform != "linux", reason="systemd units are for Linux")]


def test_execstart_as_written_serves_the_model(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """ExecStart and Environment of the written unit, split the way systemd splits them, run a real server."""
    model = tmp_path / ODD_NAME
    shutil.copytree(tiny_model, model)
    port = free_port()
    data = install(agent, "systemd", model, port, tmp_path / "user")
    unit = read_unit(Path(data["receipt"]["unit"]["path"]))  # type: ignore[index]
    prefixed, *argv = systemd_words(unit["Service"]["ExecStart"], dollar=True)  # "@FILE ARGV0 ARGS", as systemd
    assert prefixed.startswith("@")
    env = dict(w.split("=", 1) for w in systemd_words(unit["Service"]["Environment"], dollar=False))
    cwd = systemd_words(unit["Service"]["WorkingDirectory"], dollar=False)[0]
    log = unit["Service"]["StandardOutput"].removeprefix("append:")
    with open(log, "ab") as out:
        server = subprocess.Popen(
            argv,
            executable=prefixed[1:],
            env={**os.environ, **env},
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while not probe("127.0.0.1", port, {"path": "/health", "status": 200}) and server.poll() is None:
            assert time.monotonic() < deadline, "the unit's server never answered"
            time.sleep(0.25)
        assert server.poll() is None, Path(log).read_text()[-2000:]
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local")
        reply = client.chat.completions.create(
            model="default_model", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content is not None
        assert agent.run("serve", "status").data["servers"][0]["health"] == "ok"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert agent.run("serve", "stop", "--port", str(port), "--uninstall").data["result"] == "uninstalled"
