"""The training watcher's handshake with confirm, run as a real process without training anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from mlx_agent.plan.training import child_env

WATCHER = [sys.executable, "-m", "mlx_agent.supervise.train_watch"]


def spawn(receipt: Path) -> subprocess.Popen[bytes]:
    """Start a watcher for ``receipt`` with a pipe for confirm's go."""
    return subprocess.Popen(
        [*WATCHER, str(receipt)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, **child_env()},
        cwd="/",
    )


def receipt_for(pid: int, plan: dict[str, Any]) -> dict[str, Any]:
    """Return a minimal running receipt naming watcher ``pid``."""
    return {"format_version": "1.0", "kind": "train", "state": "running", "watcher": {"pid": pid}, "plan": plan}


def test_without_go_nothing_is_trained(tmp_path: Path) -> None:
    """A watcher whose confirm went away before go marks its receipt failed and exits 3 without training."""
    path = tmp_path / "r.json"
    marker = tmp_path / "trained"
    watcher = spawn(path)
    plan = {"argv": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"], "env": {}, "cwd": "/"}
    path.write_text(json.dumps(receipt_for(watcher.pid, plan)))
    output, _ = watcher.communicate(b"", timeout=60)  # closes stdin without go
    assert watcher.returncode == 3, output
    receipt = json.loads(path.read_text())
    assert receipt["state"] == "failed" and "before the training started" in receipt["reason"]
    assert not marker.exists()


def test_a_receipt_naming_another_watcher_is_not_adopted(tmp_path: Path) -> None:
    """Even after go, a watcher that is not the one its receipt names starts nothing and changes nothing."""
    path = tmp_path / "r.json"
    marker = tmp_path / "trained"
    plan = {"argv": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"], "env": {}, "cwd": "/"}
    path.write_text(json.dumps(receipt_for(1, plan)))
    before = path.read_bytes()
    watcher = spawn(path)
    output, _ = watcher.communicate(b"go", timeout=60)
    assert watcher.returncode == 3, output
    assert path.read_bytes() == before and not marker.exists()


def test_a_changed_config_file_is_refused(tmp_path: Path) -> None:
    """If the -c file no longer holds the reviewed document, the trainer is never started."""
    path = tmp_path / "r.json"
    marker = tmp_path / "trained"
    config = tmp_path / "config.yaml"
    config.write_text('{"lora_parameters": {"rank": 64}}')
    watcher = spawn(path)
    plan = {
        "argv": [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
        "env": {},
        "cwd": "/",
        "config_path": str(config),
        "config": {"lora_parameters": {"rank": 8}},
    }
    path.write_text(json.dumps(receipt_for(watcher.pid, plan)))
    output, _ = watcher.communicate(b"go", timeout=60)
    assert watcher.returncode == 0, output
    receipt = json.loads(path.read_text())
    assert receipt["state"] == "failed" and receipt["exit_code"] is None and "config" in receipt["reason"]
    assert not marker.exists()


# Writes the adapter files, says who it is, then runs until its receipt names it (or for a minute at most,
# or for an hour: ``forever``), so its identity is read while it lives.
FAKE_TRAINER = """
import json, os, sys, time
out, receipt, mode = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
for name in ("adapter_config.json", "adapters.safetensors"):
    with open(os.path.join(out, name), "w") as fh:
        fh.write(name)
print(f"fake trainer pid {os.getpid()} group {os.getpgrp()} session {os.getsid(0)}", flush=True)
if mode == "forever":
    time.sleep(3600)
for _ in range(600):
    if json.load(open(receipt)).get("trainer"):
        break
    time.sleep(0.1)
"""


def trained_receipt(tmp_path: Path, pid: int, mode: str) -> tuple[Path, dict[str, Any]]:
    """Write a running receipt for watcher ``pid`` whose plan runs the fake trainer (``mode``: once or forever)."""
    path = tmp_path / "r.json"
    config = tmp_path / "config.yaml"
    config.write_text('{"lora_parameters": {"rank": 8}}')
    plan = {
        "argv": [sys.executable, "-c", FAKE_TRAINER, str(tmp_path / "adapter"), str(path), mode],
        "env": {},
        "cwd": "/",
        "config_path": str(config),
        "config": {"lora_parameters": {"rank": 8}},
        "adapter_path": str(tmp_path / "adapter"),
        "adapter_files": ["adapter_config.json", "adapters.safetensors"],
        "base": {"kind": "path", "path": "/base"},
    }
    path.write_text(json.dumps({**receipt_for(pid, plan), "log_path": str(tmp_path / "r.log")}))
    return path, plan


def test_the_trainer_runs_in_its_own_session_and_is_recorded_as_itself(tmp_path: Path) -> None:
    """The watcher starts the trainer through spawn: its own session, the log, and its own command line recorded."""
    watcher = spawn(tmp_path / "r.json")
    path, plan = trained_receipt(tmp_path, watcher.pid, "once")
    output, _ = watcher.communicate(b"go", timeout=60)
    assert watcher.returncode == 0, output
    receipt = json.loads(path.read_text())
    trainer = receipt["trainer"]
    assert (receipt["state"], receipt["exit_code"], receipt["reason"]) == ("completed", 0, None), receipt
    assert trainer["cmdline"] == trainer["argv"] == plan["argv"]  # read after the exec, not the wrapper's
    assert trainer["pgid"] == trainer["pid"] != watcher.pid
    pid = trainer["pid"]
    log = (tmp_path / "r.log").read_text()
    assert f"fake trainer pid {pid} group {pid} session {pid}\n" in log
    assert sorted(receipt["adapter"]["files"]) == ["adapter_config.json", "adapters.safetensors"]


def test_a_killed_watcher_takes_its_trainer_with_it(tmp_path: Path) -> None:
    """SIGKILL to the watcher kills the trainer too (Linux's parent-death signal, set by spawn)."""
    import psutil

    watcher = spawn(tmp_path / "r.json")
    path, _ = trained_receipt(tmp_path, watcher.pid, "forever")
    assert watcher.stdin is not None
    watcher.stdin.write(b"go")
    watcher.stdin.close()
    for _ in range(600):
        trainer = json.loads(path.read_text()).get("trainer")
        if trainer:
            break
        time.sleep(0.1)
    assert trainer, "the watcher never recorded its trainer"
    child = psutil.Process(trainer["pid"])
    assert child.cmdline() == trainer["cmdline"]
    watcher.kill()
    watcher.wait(timeout=60)
    child.wait(timeout=60)  # it does not sleep out its hour: it was killed with its parent
    assert not child.is_running()
