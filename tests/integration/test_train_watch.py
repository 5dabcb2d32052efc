"""The training watcher's handshake with confirm, run as a real process without training anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
