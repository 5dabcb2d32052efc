"""Real trainings of the tiny model by mlx_lm.lora under our watcher: completed, failed, interrupted, refused."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import AdapterChanged
from mlx_agent.errors.commands import BaseModelChanged, TrainingIncomplete
from mlx_agent.plan.training_receipt import check_training_receipt, load_training_receipt
from tests.conftest import LAUNCHER, Agent, assert_valid
from tests.fixtures.tiny_dataset import text_lines, write_dataset
from tests.lora_support import settled, start, status_of, train_args, wait_for

pytestmark = pytest.mark.e2e

LONG = ("--iters", "100000", "--steps-per-report", "1", "--steps-per-eval", "100000")


def trainer_recorded(receipt_path: str) -> dict[str, Any]:
    """Wait until the watcher has recorded the trainer's identity, and return the receipt."""

    def check() -> dict[str, Any] | None:
        receipt: dict[str, Any] = json.loads(Path(receipt_path).read_text())
        return receipt if receipt.get("trainer") else None

    receipt: dict[str, Any] = wait_for("the trainer's identity", check)
    return receipt


def test_training_completes_with_a_truthful_receipt(trainer_agent: Agent, model_copy: Path, tmp_path: Path) -> None:
    """A confirmed training completes; its receipt pins the base and the adapter hashes, which checks then guard."""
    data = write_dataset(tmp_path / "data")
    adapter = tmp_path / "adapter"
    started = start(trainer_agent, train_args(model_copy, data, adapter, "--steps-per-report", "1"))
    receipt_path = started["receipt_path"]
    assert started["receipt"]["state"] == "running" and started["receipt"]["exit_code"] is None
    entry = settled(trainer_agent, receipt_path, "completed")
    assert entry["iterations"] == {"done": 3, "total": 3} and entry["exit_code"] == 0
    assert entry["train_loss"] is not None and entry["train_loss"]["iteration"] == 3
    assert entry["val_loss"] is not None

    receipt, digest = load_training_receipt(receipt_path)
    assert digest == hashlib.sha256(Path(receipt_path).read_bytes()).hexdigest()
    assert_valid("training_receipt", receipt)
    assert receipt["exit_code"] == 0 and receipt["state"] == "completed"
    assert receipt["base"] is not None and receipt["adapter"] is not None and receipt["trainer"] is not None
    assert receipt["base"] == receipt["plan"]["base"] and receipt["base"]["path"] == str(model_copy)
    for name, record in receipt["adapter"]["files"].items():
        raw = (adapter / name).read_bytes()
        assert record == {"sha256": hashlib.sha256(raw).hexdigest(), "size": len(raw)}
    assert receipt["trainer"]["argv"] == receipt["plan"]["argv"] == receipt["trainer"]["cmdline"]
    assert json.loads(Path(receipt["config_path"]).read_text()) == receipt["plan"]["config"]
    assert "trainer exited with status 0" in Path(receipt["log_path"]).read_text()

    directory = Path(receipt_path).parent
    checked = check_training_receipt(receipt, directory)
    assert checked["adapter"] == receipt["adapter"] and checked["base"] == receipt["base"]
    weights = adapter / "adapters.safetensors"
    original = weights.read_bytes()
    weights.write_bytes(original[:-1] + bytes([original[-1] ^ 0x01]))
    with pytest.raises(AdapterChanged):
        check_training_receipt(receipt, directory)
    weights.write_bytes(original)
    check_training_receipt(receipt, directory)
    base_weights = model_copy / "model.safetensors"
    st = base_weights.stat()
    os.utime(base_weights, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    with pytest.raises(BaseModelChanged):
        check_training_receipt(receipt, directory)

    again = trainer_agent.run(*train_args(model_copy, data, adapter))
    assert again.code == "adapter_path_not_empty"
    human = subprocess.run(
        [sys.executable, str(LAUNCHER), "lora", "status"],
        capture_output=True,
        text=True,
        env={**trainer_agent.env, "COLUMNS": "200"},
        timeout=60,
    )
    assert human.returncode == 0 and "completed" in human.stdout and "3/3" in human.stdout


def test_a_dataset_line_mlx_lm_rejects_records_failed(trainer_agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A line that is not JSON (past the first) makes mlx_lm exit 1, which the receipt records as failed."""
    data = write_dataset(tmp_path / "data", train=0)
    (data / "train.jsonl").write_text("\n".join([*text_lines(4), "this is not json", *text_lines(3)]) + "\n")
    started = start(trainer_agent, train_args(tiny_model, data, tmp_path / "adapter"))
    entry = settled(trainer_agent, started["receipt_path"], "failed")
    assert entry["exit_code"] == 1 and entry["adapter"] is None and entry["iterations"]["done"] == 0
    receipt, _ = load_training_receipt(started["receipt_path"])
    assert_valid("training_receipt", receipt)
    assert receipt["reason"] == "the trainer exited with 1"
    with pytest.raises(TrainingIncomplete):
        check_training_receipt(receipt, Path(started["receipt_path"]).parent)


def test_a_killed_trainer_records_its_signal(trainer_agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """SIGKILL to the trainer is recorded as failed with exit code -9 and the signal's name."""
    data = write_dataset(tmp_path / "data")
    started = start(trainer_agent, train_args(tiny_model, data, tmp_path / "adapter", *LONG))
    receipt = trainer_recorded(started["receipt_path"])
    assert status_of(trainer_agent, started["receipt_path"])["state"] == "running"
    os.kill(receipt["trainer"]["pid"], signal.SIGKILL)
    entry = settled(trainer_agent, started["receipt_path"], "failed")
    assert entry["exit_code"] == -9 and entry["signal"] == "SIGKILL" and entry["adapter"] is None
    assert_valid("training_receipt", json.loads(Path(started["receipt_path"]).read_text()))


def test_term_to_the_watcher_is_passed_on_and_recorded(trainer_agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """SIGTERM to the watcher stops the trainer, and the watcher records the trainer's real exit."""
    data = write_dataset(tmp_path / "data")
    started = start(trainer_agent, train_args(tiny_model, data, tmp_path / "adapter", *LONG))
    receipt = trainer_recorded(started["receipt_path"])
    os.kill(receipt["watcher"]["pid"], signal.SIGTERM)
    entry = settled(trainer_agent, started["receipt_path"], "failed")
    assert entry["exit_code"] == -signal.SIGTERM and entry["signal"] == "SIGTERM"


def test_a_killed_watcher_is_reported_interrupted(trainer_agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """With the watcher killed nothing records the end, so status says interrupted; on Linux the trainer dies too."""
    data = write_dataset(tmp_path / "data")
    started = start(trainer_agent, train_args(tiny_model, data, tmp_path / "adapter", *LONG))
    receipt = trainer_recorded(started["receipt_path"])
    os.kill(receipt["watcher"]["pid"], signal.SIGKILL)
    entry = settled(trainer_agent, started["receipt_path"], "interrupted")
    assert entry["exit_code"] is None and entry["reason"]
    if sys.platform.startswith("linux"):
        wait_for(
            "the trainer to die with its watcher",
            lambda: not status_of(trainer_agent, started["receipt_path"])["trainer_alive"],
        )
    assert json.loads(Path(started["receipt_path"]).read_text())["state"] == "running"


def test_a_second_confirm_while_running_is_refused(trainer_agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """While a training runs, confirming it again or previewing another into its adapter path is training_running."""
    data = write_dataset(tmp_path / "data")
    args = train_args(tiny_model, data, tmp_path / "adapter", *LONG)
    preview_hash = trainer_agent.run(*args).data["plan"]["preview_hash"]
    first = trainer_agent.run(*args, "--confirm", "--preview-hash", preview_hash)
    assert first.rc == 0, first.stdout
    trainer_recorded(first.data["receipt_path"])
    second = trainer_agent.run(*args, "--confirm", "--preview-hash", preview_hash)
    assert second.rc == 1 and second.code == "training_running"
    refused = trainer_agent.run(*args, "--seed", "7")  # another plan, the same adapter path
    assert refused.rc == 1 and refused.code == "training_running"
    listed = trainer_agent.run("lora", "status")
    assert [t["state"] for t in listed.data["trainings"]] == ["running"]
