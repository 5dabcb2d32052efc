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
Both tests share that front and its slowed worker (``slow_front``): each arms the hold-back before its agent
starts (the next stream the worker answers is held), and reads the front's log written since it began. The model
reads the note when offered Read (Claude Code) and cats it when offered exec_command (Codex).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
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
    loopback_namespace,
    sessions_model,
)
from tests.conftest import REPO_ROOT, free_port
from tests.gateway_support import CONTROL_TOKEN, gateway_config, private_file, real_worker_argv

pytestmark = pytest.mark.e2e

ANSWER = "Basil"
CLIENT_TIMEOUT_MS = 12000
SLOW_PREFILL_S = 3.5 * CLIENT_TIMEOUT_MS / 1000
HELD = "slow entry: holding the first stream back"
# Runs the wrapped entry with the first streamed answer after each arming held back after its head (as a long
# prefill is: the worker has begun its answer and says nothing more until the prompt is processed). A test arms
# it by writing the file SLOW_ARM names; the held stream takes it away.
SLOW_ENTRY = r"""
import os, sys, threading, time
import mlx_agent.runtime.serving.handler as handler
from mlx_agent.runtime.entry import main

original = handler.WrappedHandler.end_headers
lock = threading.Lock()

def armed():
    with lock:
        try:
            os.remove(os.environ["SLOW_ARM"])
        except FileNotFoundError:
            return False
        return True

def slow(self):
    original(self)
    if getattr(self, "stream", False) and armed():
        print("slow entry: holding the first stream back", flush=True)
        self.wfile.flush()
        time.sleep(float(os.environ["SLOW_PREFILL_S"]))

handler.WrappedHandler.end_headers = slow
sys.exit(main(sys.argv[1:]))
"""


@dataclass
class SlowFront:
    """The front over the slowed worker, inside its namespace: its port, its log, and the hold-back's arming file."""

    namespace: Namespace
    port: int
    log: Path
    worker_log: Path
    arm: Path

    def armed(self) -> tuple[int, int]:
        """Arm the hold-back for the next stream; return the front log's and the worker log's length so far.

        The worker starts on the first request (its log with it).
        """
        assert not self.arm.exists()  # the last test's stream took its arming
        so_far = len(self.log.read_text()), len(self.worker_log.read_text()) if self.worker_log.exists() else 0
        self.arm.write_text("armed\n")
        return so_far


@pytest.fixture(scope="module")
def slow_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlowFront]:
    """Run one front over the slowed worker serving a model that reads or cats the note, in its own namespace."""
    root = tmp_path_factory.mktemp("slow")
    note = root / "note.txt"
    note.write_text("The secret word is basil.\n")
    scripts = {"Read": [("Read", {"file_path": str(note)})], "exec_command": [("exec_command", {"cmd": f"cat {note}"})]}
    model = sessions_model(root / "model", scripts, ANSWER)
    with loopback_namespace() as namespace, front_inside(namespace, root, model) as (port, log_path):
        yield SlowFront(namespace, port, log_path, root / "serve" / f"{port}.worker.log", root / "arm")


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
    slowing = {"SLOW_PREFILL_S": str(SLOW_PREFILL_S), "SLOW_ARM": str(tmp_path / "arm"), "PYTHONPATH": str(REPO_ROOT)}
    config["models"][0]["worker"]["env"].update(slowing)
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


def test_claude_code_waits_out_a_prefill_longer_than_its_stream_timeouts(slow_front: SlowFront, tmp_path: Path) -> None:
    """A first prefill 3.5 times Claude Code's idle and first-byte timeouts is answered once, and the run finishes."""
    front, worker = slow_front.armed()
    home = tmp_path / "claude-home"
    home.mkdir()
    env = claude_env(
        home,
        slow_front.port,
        CLAUDE_BYTE_STREAM_IDLE_TIMEOUT_MS=str(CLIENT_TIMEOUT_MS),
        CLAUDE_STREAM_FIRST_BYTE_TIMEOUT_MS=str(CLIENT_TIMEOUT_MS),
    )
    note = slow_front.log.parent / "note.txt"
    done = slow_front.namespace.run(claude_reads(note), env, tmp_path, timeout=400)
    front_log = slow_front.log.read_text()[front:]
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, result
    turns = first_turns(front_log, "/v1/messages")
    assert len(turns) == 1 and turns[0]["status"] == 200, turns  # the slow first request was not sent again
    assert slow_front.worker_log.read_text()[worker:].count(HELD) == 1  # this test's first stream was held


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


def test_codex_waits_out_a_prefill_longer_than_its_stream_idle_timeout(slow_front: SlowFront, tmp_path: Path) -> None:
    """A first prefill 3.5 times Codex's stream idle timeout is answered once, and `codex exec` finishes."""
    front, worker = slow_front.armed()
    provider = f"stream_idle_timeout_ms = {CLIENT_TIMEOUT_MS}\n"
    home = codex_home(tmp_path / "codex-home", slow_front.port, provider=provider)
    env = clean_env(tmp_path, CODEX_HOME=str(home), LOCAL_API_KEY="unused")
    note = slow_front.log.parent / "note.txt"
    done = slow_front.namespace.run(
        codex_exec(f"Run cat {note} and tell me the word."),
        env,
        tmp_path,
        timeout=400,
    )
    front_log = slow_front.log.read_text()[front:]
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == ANSWER, done.stdout
    turns = first_turns(front_log, "/v1/responses")
    assert len(turns) == 1 and turns[0]["status"] == 200, turns  # the slow first request was not sent again
    assert slow_front.worker_log.read_text()[worker:].count(HELD) == 1  # this test's first stream was held
