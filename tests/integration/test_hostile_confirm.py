"""Around a confirm: the reviewed interpreter is what runs, no front runs unnamed, no state link is followed.

Each test stages what an attacker (or a crash) does around ``serve start --confirm`` first, then checks it
fails: an interpreter link swapped for a script after a JIT confirm, the CLI killed at points of its confirm,
a link planted at ``<port>.sockets``, and a disk that fills up during the confirm.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from mlx_agent.spawn import spawn
from tests.conftest import Agent, free_port
from tests.disk_support import small_disk
from tests.gateway_support import fake_worker_argv, gateway_config, start_gateway
from tests.integration.interpreter_support import cli, listeners, make_venv, swap_for_script

SETTLE_S = 30.0  # how long a front may take to listen or end after its CLI is gone (a bound, not a measure)


def chat(port: int) -> tuple[int, dict[str, Any]]:
    """Send one chat completion to the front on ``port`` and return its status and body."""
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_swapped_interpreter_link_after_a_jit_confirm_never_runs(
    agent: Agent, tiny_model: Path, tmp_path: Path
) -> None:
    """A venv's bin/python3 swapped for a script after a JIT confirm: the script never runs, the load is refused."""
    venv = make_venv(tmp_path / "venv")
    python = venv / "bin" / "python3"
    marker = tmp_path / "script-ran"
    port = free_port()
    args = ["serve", "start", "--path", str(tiny_model), "--port", str(port), "--jit", "--max-tokens", "4"]
    preview = cli(python, agent, *args)
    assert preview["status"] == "ok", preview
    assert preview["data"]["plan"]["models"][0]["runtime"]["interpreter"] == str(python)
    confirmed = cli(python, agent, *args, "--confirm", "--preview-hash", preview["data"]["plan"]["preview_hash"])
    assert confirmed["status"] == "ok", confirmed
    worker = confirmed["data"]["receipt"]["plan"]["models"][0]["worker"]
    assert worker["argv"][0] == str(python) and worker["executable"] == os.path.realpath(python)
    swap_for_script(python, marker)
    status, body = chat(port)
    assert not marker.exists(), "the swapped-in script ran"
    assert (status, body["error"]["code"]) == (503, "runtime_changed"), body
    state = agent.run("serve", "status", "--port", str(port)).data["servers"][0]
    changed = state["last_error"]["details"]["changed"]
    assert {"path": str(python), "reason": "link_changed"}.items() <= changed[0].items()
    assert (state["loads"], state["worker"]) == (0, None)


SHOW_PREFIX = "import sys; print('prefix', sys.prefix, sys.executable)"


def test_a_worker_starts_by_the_reviewed_file_and_keeps_its_venv(tmp_path: Path) -> None:
    """Spawned by the reviewed file with argv[0] kept, a swapped link is not followed and the venv is still found."""
    venv = make_venv(tmp_path / "venv")
    python = venv / "bin" / "python3"
    reviewed = os.path.realpath(python)
    marker = tmp_path / "script-ran"
    swap_for_script(python, marker)
    # Run spawn() from a process whose own sys.executable is the swapped link (as a front's is after the swap),
    # so the Linux parent-death wrapper is exercised too.
    code = (
        "import sys\nfrom pathlib import Path\nfrom mlx_agent.spawn import spawn\n"
        f"for wrap in (True, False):\n"
        f"    child = spawn([{str(python)!r}, '-c', {SHOW_PREFIX!r}], {{}}, Path({str(tmp_path / 'w.log')!r}), '/',"
        f" die_with_parent=wrap, executable={reviewed!r})\n"
        "    assert child.wait(timeout=60) == 0\n"
    )
    done = subprocess.run(
        [str(python), "-c", code], executable=reviewed, capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not marker.exists(), "the swapped-in script ran"
    lines = [line for line in (tmp_path / "w.log").read_text().splitlines() if line.startswith("prefix")]
    assert lines == [f"prefix {venv} {python}"] * 2
    log = tmp_path / "plain.log"
    child = spawn([str(python), "-c", SHOW_PREFIX], {}, log, "/", die_with_parent=True, executable=reviewed)
    assert child.wait(timeout=60) == 0 and not marker.exists()


def front_processes(config_path: Path) -> list[psutil.Process]:
    """Return the live processes (not zombies) whose command line names this front config (test code only)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if str(config_path) in (proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def settled(config_path: Path, port: int) -> None:
    """Wait until every front of this config either listens on ``port`` or has ended."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        fronts = {p.pid for p in front_processes(config_path)}
        if fronts <= listeners(port):
            return
        time.sleep(0.1)
    raise AssertionError(f"fronts {fronts} neither listen on {port} nor end")


def kill_when_a_front_exists(cli_proc: subprocess.Popen[str], config_path: Path) -> None:
    """SIGKILL the CLI the moment a process running this front config appears (right after it is spawned)."""
    needle = str(config_path).encode()
    seen = set(os.listdir("/proc"))
    while cli_proc.poll() is None:
        now = os.listdir("/proc")
        for pid in (p for p in now if p.isdigit() and p not in seen):
            with contextlib.suppress(OSError):
                if needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                    cli_proc.send_signal(signal.SIGKILL)
                    return
        seen.update(now)


@pytest.mark.parametrize("when", ["0.1", "0.2", "0.5", "1.0", "front_spawned"])
def test_a_cli_killed_during_confirm_leaves_no_front_that_status_does_not_name(
    agent: Agent, tiny_model: Path, when: str
) -> None:
    """SIGKILL of the CLI at points of a JIT confirm: every front listening on the port is in status; stop ends it."""
    port = free_port()
    args = ("--path", str(tiny_model), "--port", str(port), "--jit", "--max-tokens", "4")
    preview_hash = agent.preview_hash(*args)
    config_path = agent.serve_dir / f"{port}.front.json"
    cli_proc = agent.popen("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    if when == "front_spawned":
        kill_when_a_front_exists(cli_proc, config_path)
    else:
        time.sleep(float(when))
        cli_proc.send_signal(signal.SIGKILL)
    cli_proc.communicate(timeout=60)
    try:
        settled(config_path, port)
        listening = listeners(port)
        named = {s["pid"] for s in agent.run("serve", "status").data["servers"] if s["port"] == port}
        assert listening <= named, f"fronts {listening - named} listen on {port} with no receipt naming them"
        stopped = agent.run("serve", "stop", "--port", str(port))
        assert stopped.rc == 0 or stopped.code == "receipt_not_found", stopped.stdout
        deadline = time.monotonic() + SETTLE_S
        while (front_processes(config_path) or listeners(port)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not front_processes(config_path) and not listeners(port)
    finally:  # a front no receipt names is this test's to end (stop cannot): by its own process group
        for proc in front_processes(config_path):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def test_a_sockets_link_planted_before_confirm_is_refused_and_not_chmodded(
    agent: Agent, tiny_model: Path, tmp_path: Path
) -> None:
    """A link at <port>.sockets to another user's directory: state_dir_unsafe at confirm, its mode and contents kept."""
    victim = tmp_path / "someone-elses"
    victim.mkdir()
    victim.chmod(0o755)
    os.chown(victim, 65534, 65534)  # nobody's
    port = free_port()
    receipts = Path(tempfile.mkdtemp(prefix="h", dir="/tmp"))  # short enough for the plan's own socket directory
    try:
        args = ["--path", str(tiny_model), "--port", str(port), "--jit", "--receipts-dir", str(receipts)]
        preview_hash = agent.preview_hash(*args)
        link = receipts / "serve" / f"{port}.sockets"
        link.parent.mkdir(mode=0o700, exist_ok=True)
        link.symlink_to(victim)
        result = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
        assert (result.rc, result.code) == (1, "state_dir_unsafe"), result.stdout
        assert result.doc["error"]["details"]["path"] == str(link)
        st = victim.stat()
        assert (st.st_mode & 0o777, st.st_uid, list(victim.iterdir())) == (0o755, 65534, [])
        assert not listeners(port) and not (link.parent / f"{port}.token").exists()
        assert agent.run("serve", "start", *args).code == "state_dir_unsafe"  # a preview says so too
    finally:
        agent.run("serve", "stop", "--port", str(port), "--receipts-dir", str(receipts))
        shutil.rmtree(receipts)


def test_a_front_refuses_a_sockets_link_before_it_listens(tmp_path: Path) -> None:
    """A front whose socket directory became a link exits with state_dir_unsafe, the target's mode unchanged."""
    victim = tmp_path / "someone-elses"
    victim.mkdir()
    victim.chmod(0o755)
    link = tmp_path / "serve" / "sockets"
    link.parent.mkdir(mode=0o700)
    link.symlink_to(victim)
    config = gateway_config(
        tmp_path, free_port(), fake_worker_argv(tmp_path), model_path=tmp_path / "model", socket_dir=str(link)
    )
    gateway = start_gateway(tmp_path, config, wait=False)
    try:
        assert gateway.proc.wait(timeout=60) == 3
        assert '"code": "state_dir_unsafe"' in gateway.log_path.read_text()
        assert (victim.stat().st_mode & 0o777, list(victim.iterdir())) == (0o755, [])
    finally:
        gateway.stop()


def test_a_disk_full_during_confirm_leaves_no_token(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A home that fills between preview and confirm: state_write_failed, and no token or config is left behind."""
    with small_disk(tmp_path, "1m") as receipts:
        port = free_port()
        args = ["--path", str(tiny_model), "--port", str(port), "--jit", "--receipts-dir", str(receipts)]
        preview_hash = agent.preview_hash(*args)
        serve = receipts / "serve"
        with contextlib.suppress(OSError), open(serve / "filler", "wb", buffering=0) as fh:
            while True:
                fh.write(b"\0" * 4096)
        result = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
        assert (result.rc, result.code) == (1, "state_write_failed"), result.stdout + result.stderr
        left = sorted(p.name for p in serve.iterdir())
        assert not [n for n in left if n.startswith(f"{port}.") and n.endswith((".token", ".front.json", ".json"))]
        assert not listeners(port)
