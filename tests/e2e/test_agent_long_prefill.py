"""Real Claude Code and Codex do not abandon a request whose prefill outlasts their stream timeouts.

Claude Code gives up on a stream that shows nothing for a while and sends the whole prompt again. Its
byte-level idle timeout (``CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS``, 300 s by default, 10 s at the least) and its
first-byte timeout (``CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS``) are scaled down here to 12 s, and the first
streamed answer is held back 3.5 times that long, in the test only: the worker is the real wrapped entry on the
scripted tiny model, started through a wrapper that sleeps after the first stream's head, as a worker in a long
prefill is silent after its head. Against the front before its keep-alives, Claude Code abandoned that request
and sent it again; here it is answered once. Its event-level watchdog (``CLAUDE_STREAM_IDLE_TIMEOUT_MS``)
cannot be set below 300 s, so it is not exercised here; pings reset it (at most 30 in a row), which is why the
Anthropic stream sends one at most every 60 s (tests/unit/test_gateway_anthropic_stream.py).

Codex's provider setting ``stream_idle_timeout_ms`` (300 s by default) is scaled down the same way.

The agent and the front both run inside a network namespace that has only loopback (tests/agents_support.py).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.gateway.observe.request_log import REQUEST_LINE
from tests.agents_support import (
    Namespace,
    claude_env,
    claude_reads,
    clean_env,
    codex_exec,
    codex_home,
    scripted_agent_model,
)
from tests.conftest import REPO_ROOT, free_port
from tests.gateway_support import CONTROL_TOKEN, gateway_config, private_file, real_worker_argv

pytestmark = pytest.mark.e2e

ANSWER = "Basil"
CLIENT_TIMEOUT_MS = 12000
SLOW_PREFILL_S = 3.5 * CLIENT_TIMEOUT_MS / 1000
# Runs the wrapped entry with the first streamed answer held back after its head (as a long prefill is: the
# worker has begun its answer and says nothing more until the prompt is processed).
SLOW_ENTRY = r"""
import os, sys, threading, time
import mlx_agent.runtime.serving.handler as handler
from mlx_agent.runtime.entry import main

original = handler.WrappedHandler.end_headers
first = threading.Event()

def slow(self):
    original(self)
    if getattr(self, "stream", False) and not first.is_set():
        first.set()
        print("slow entry: holding the first stream back", flush=True)
        self.wfile.flush()
        time.sleep(float(os.environ["SLOW_PREFILL_S"]))

handler.WrappedHandler.end_headers = slow
sys.exit(main(sys.argv[1:]))
"""


@contextlib.contextmanager
def front_inside(namespace: Namespace, tmp_path: Path, model: Path) -> Iterator[tuple[int, Path]]:
    """Run the front inside ``namespace`` over the slowed worker; yield its port and log."""
    script = tmp_path / "slow_entry.py"
    script.write_text(SLOW_ENTRY)
    argv = [sys.executable, str(script), *real_worker_argv(model, 256)[3:]]  # the entry's own arguments
    port = free_port()
    config = gateway_config(
        tmp_path, port, argv, model_path=model, alias=["claude-*", "gpt-*"], max_tokens=256, log_prompts=True
    )
    config["models"][0]["worker"]["env"].update(SLOW_PREFILL_S=str(SLOW_PREFILL_S), PYTHONPATH=str(REPO_ROOT))
    private_file(Path(config["control_token_path"]), CONTROL_TOKEN + "\n")
    config_path = private_file(tmp_path / "front.json", json.dumps(config))
    log_path = tmp_path / "front.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*namespace.prefix, sys.executable, "-m", "mlx_agent.gateway", "--config", str(config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
        )
    try:
        probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=2)"
        deadline = time.monotonic() + 30
        while namespace.run([sys.executable, "-c", probe], {}, tmp_path, timeout=10).returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        yield port, log_path
    finally:
        proc.terminate()  # the front stops its worker
        proc.wait(timeout=30)


def test_claude_code_waits_out_a_prefill_longer_than_its_stream_timeouts(tmp_path: Path, namespace: Namespace) -> None:
    """A first prefill 3.5 times Claude Code's idle and first-byte timeouts is answered once, and the run finishes."""
    note = tmp_path / "note.txt"
    note.write_text("The secret word is basil.\n")
    model = scripted_agent_model(tmp_path / "model", "Read", {"file_path": str(note)}, ANSWER)
    with front_inside(namespace, tmp_path, model) as (port, log_path):
        home = tmp_path / "claude-home"
        home.mkdir()
        env = claude_env(
            home,
            port,
            CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS=str(CLIENT_TIMEOUT_MS),
            CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS=str(CLIENT_TIMEOUT_MS),
        )
        done = namespace.run(claude_reads(note), env, tmp_path, timeout=400)
        front_log = log_path.read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, result
    turns = first_turns(front_log, "/v1/messages")
    assert len(turns) == 1 and turns[0]["status"] == 200, turns  # the slow first request was not sent again
    assert "slow entry: holding the first stream back" in (tmp_path / "serve" / f"{port}.worker.log").read_text()


def first_turns(front_log: str, endpoint: str) -> list[dict[str, Any]]:
    """Return the request lines to ``endpoint`` whose prompt holds no tool result (the agent's first turn)."""
    lines = [
        json.loads(text.split(REQUEST_LINE, 1)[1]) for text in front_log.splitlines() if REQUEST_LINE + "{" in text
    ]
    return [
        line
        for line in lines
        if line["endpoint"] == endpoint and not any(m.get("role") == "tool" for m in line["prompt"])
    ]


def test_codex_waits_out_a_prefill_longer_than_its_stream_idle_timeout(tmp_path: Path, namespace: Namespace) -> None:
    """A first prefill 3.5 times Codex's stream idle timeout is answered once, and `codex exec` finishes."""
    note = tmp_path / "note.txt"
    note.write_text("The secret word is basil.\n")
    model = scripted_agent_model(tmp_path / "model", "exec_command", {"cmd": f"cat {note}"}, ANSWER)
    with front_inside(namespace, tmp_path, model) as (port, log_path):
        home = codex_home(tmp_path / "codex-home", port, provider=f"stream_idle_timeout_ms = {CLIENT_TIMEOUT_MS}\n")
        env = clean_env(tmp_path, CODEX_HOME=str(home), LOCAL_API_KEY="unused")
        done = namespace.run(
            codex_exec(f"Run cat {note} and tell me the word."),
            env,
            tmp_path,
            timeout=400,
        )
        front_log = log_path.read_text()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == ANSWER, done.stdout
    turns = first_turns(front_log, "/v1/responses")
    assert len(turns) == 1 and turns[0]["status"] == 200, turns  # the slow first request was not sent again
    assert "slow entry: holding the first stream back" in (tmp_path / "serve" / f"{port}.worker.log").read_text()
