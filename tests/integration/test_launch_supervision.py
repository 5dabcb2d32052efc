"""Launch supervision with stand-in runtimes: failures, time-outs and interrupts leave nothing running."""

from __future__ import annotations

import fcntl
import json
import signal
import stat
import subprocess
from pathlib import Path

import psutil

from tests.conditions import wait_until
from tests.conftest import FAKE_SERVER, Agent, assert_valid, fake_runtime, free_port, processes_mentioning


def start_args(model: Path, exe: Path, port: int, *extra: str) -> list[str]:
    """Return serve start arguments for a stand-in runtime."""
    return ["--path", str(model), "--runtime-executable", str(exe), "--port", str(port), *extra]


def confirm(agent: Agent, args: list[str]) -> tuple[int, dict[str, object]]:
    """Preview then confirm ``args``; return the confirm's exit code and envelope."""
    preview_hash = agent.preview_hash(*args)
    result = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    return result.rc, result.doc


def test_child_that_exits_is_launch_failed_with_log_tail(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A server that dies while loading fails confirm at once with its last log lines; no receipt remains."""
    exe = fake_runtime(tmp_path, "import sys\nprint('cannot load weights: boom', flush=True)\nsys.exit(3)")
    rc, doc = confirm(agent, start_args(tiny_model, exe, free_port(), "--ready-timeout", "60"))
    error = doc["error"]
    assert isinstance(error, dict)
    assert (rc, error["code"]) == (1, "launch_failed")
    assert error["details"]["exit_code"] == 3
    assert "cannot load weights: boom" in error["details"]["log_tail"]
    assert not list(agent.serve_dir.glob("*.json"))


def test_slow_child_is_readiness_timeout_and_stopped(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A server that never answers is stopped after --ready-timeout; nothing is left running."""
    exe = fake_runtime(
        tmp_path, "import time\nprint('loading forever', flush=True)\ntime.sleep(600)", name="slow-server"
    )
    rc, doc = confirm(agent, start_args(tiny_model, exe, free_port(), "--ready-timeout", "1.5"))
    error = doc["error"]
    assert isinstance(error, dict)
    assert (rc, error["code"]) == (1, "readiness_timeout")
    assert not list(agent.serve_dir.glob("*.json"))
    assert processes_mentioning(str(exe)) == []


def test_term_ignoring_child_is_killed(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A server that ignores SIGTERM is killed after the grace period."""
    body = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"
    exe = fake_runtime(tmp_path, body, name="stubborn-server")
    rc, _doc = confirm(agent, start_args(tiny_model, exe, free_port(), "--ready-timeout", "1"))
    assert rc == 1
    assert processes_mentioning(str(exe)) == []


def confirm_waiting(agent: Agent, tiny_model: Path, exe: Path, port: int) -> tuple[subprocess.Popen[str], Path]:
    """Start a confirm of ``exe`` on ``port`` that waits for readiness; return it once its receipt exists."""
    args = start_args(tiny_model, exe, port, "--ready-timeout", "120")
    preview_hash = agent.preview_hash(*args)
    cli = agent.popen("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    receipt = agent.serve_dir / f"{port}.json"
    wait_until(receipt.exists, "the waiting confirm wrote its receipt")
    return cli, receipt


def test_interrupt_stops_the_child(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """Ctrl-C during the wait stops the server and removes its receipt."""
    exe = fake_runtime(tmp_path, "import time\ntime.sleep(600)", name="interrupted-server")
    cli, receipt = confirm_waiting(agent, tiny_model, exe, free_port())
    assert receipt.exists(), "the receipt is written as soon as the process exists"
    cli.send_signal(signal.SIGINT)
    stdout, _ = cli.communicate(timeout=30)
    assert cli.returncode == 1
    assert '"launch_interrupted"' in stdout
    assert not receipt.exists()
    assert processes_mentioning(str(exe)) == []


def test_a_server_whose_confirm_was_killed_is_orphaned(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A confirm killed (SIGKILL) while it waits leaves a server that status calls orphaned, and stop ends it."""
    exe = fake_runtime(tmp_path, "import time\ntime.sleep(600)", name="orphaned-server")
    port = free_port()
    cli, _ = confirm_waiting(agent, tiny_model, exe, port)
    assert agent.run("serve", "status").data["servers"][0]["state"] == "starting"
    cli.kill()
    cli.wait(30)
    assert agent.run("serve", "status").data["servers"][0]["state"] == "orphaned"
    assert agent.run("serve", "stop", "--port", str(port)).data["result"] == "stopped"
    assert processes_mentioning(str(exe)) == []


def test_lifecycle_with_a_stand_in_server(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """Confirm writes a private, schema-valid receipt; another start on its port is port_in_use; stop ends the group."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="quick-server")
    port = free_port()
    args = start_args(tiny_model, exe, port)
    rc, doc = confirm(agent, args)
    assert rc == 0, doc
    # A second start for the port of a live server of ours is port_in_use, and the first survives (status below).
    assert agent.run("serve", "start", *args).code == "port_in_use"
    assert agent.run("serve", "status").data["servers"][0]["state"] == "running"
    data = doc["data"]
    assert isinstance(data, dict)
    receipt = data["receipt"]
    assert_valid("serve_receipt", receipt)
    path = Path(data["receipt_path"])
    assert path.parent == agent.serve_dir
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "listening on http://127.0.0.1" in Path(receipt["log_path"]).read_text()  # the front's own log
    worker_log = Path(receipt["plan"]["models"][0]["worker"]["log_path"])
    assert "fake server listening" in worker_log.read_text()
    assert receipt["argv"] == receipt["plan"]["argv"]
    assert psutil.Process(receipt["pid"]).environ()["HF_HUB_OFFLINE"] == "1"
    server = agent.run("serve", "status", "--port", str(port)).data["servers"][0]
    assert (server["state"], server["health"], server["pid"]) == ("running", "ok", receipt["pid"])
    stop = agent.run("serve", "stop", "--port", str(port))
    assert (stop.rc, stop.data["result"], stop.data["how"]) == (0, "stopped", "terminated")
    assert not path.exists()
    assert not psutil.pid_exists(receipt["pid"]) or psutil.Process(receipt["pid"]).status() == "zombie"


def test_receipts_dir_applies_to_start_status_and_stop(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """--receipts-dir moves receipts for every command; the default location then stays empty."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="quick-server")
    port = free_port()
    base = tmp_path / "elsewhere"
    args = [*start_args(tiny_model, exe, port), "--receipts-dir", str(base)]
    assert confirm(agent, args)[0] == 0
    assert (base / "serve" / f"{port}.json").exists()
    assert agent.run("serve", "status").data["servers"] == []
    assert agent.run("serve", "status", "--receipts-dir", str(base)).data["servers"][0]["port"] == port
    assert agent.run("serve", "stop", "--port", str(port), "--receipts-dir", str(base)).rc == 0


def test_concurrent_stops_one_stops_the_rest_already_stopped(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """Ten stops of one server at once: exactly one stops it, the other nine say already_stopped, all exit 0."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="quick-server")
    port = free_port()
    assert confirm(agent, start_args(tiny_model, exe, port))[0] == 0
    lock = agent.serve_dir / f"{port}.lock"
    # Hold the port's lock until all ten have seen the receipt and wait on the lock: on a loaded machine a
    # stop started late would otherwise find no receipt at all, which is receipt_not_found, not this race.
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        stops = [agent.popen("serve", "stop", "--port", str(port)) for _ in range(10)]
        wait_until(lambda: all(_has_open(proc.pid, lock) for proc in stops), "every stop waits on the port's lock", 120)
    results = []
    for proc in stops:
        out, _ = proc.communicate(timeout=120)
        results.append((proc.returncode, json.loads(out)["data"].get("result")))
    assert sorted(results) == [(0, "already_stopped")] * 9 + [(0, "stopped")]


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` holds ``path`` open (a stop waiting on the port's lock does)."""
    try:
        return any(Path(f.path) == path for f in psutil.Process(pid).open_files())
    except psutil.NoSuchProcess:
        return True  # it finished (or failed): communicate() below says how
