"""LoRA training: preview, confirm (spawn the watcher detached, with its receipt first), and status.

A training's receipt is ``<receipts base>/train/<id>.json`` with its log ``<id>.log`` beside it; ``<id>`` is
the first 16 hex digits of the plan's hash, so one reviewed plan has one receipt. Confirm only starts the
watcher (``supervise/train_watch.py``), which starts the trainer and records its outcome; confirm returns at
once. Status reads receipts and logs and checks processes; it never imports mlx.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from mlx_agent.canonical import with_hash
from mlx_agent.errors import LaunchFailed, ReceiptError
from mlx_agent.errors.commands import AdapterPathNotEmpty, LockTimeout, TrainingRunning
from mlx_agent.files import open_private, private_dir, utc_now, write_json_atomic
from mlx_agent.home import previews_dir, receipts_dir
from mlx_agent.plan.training_receipt import read_training_receipt
from mlx_agent.supervise import process
from mlx_agent.supervise.locks import file_lock
from mlx_agent.supervise.previews import reviewed_plan, save_preview
from mlx_agent.supervise.train_log import read_progress
from mlx_agent.wire import TRAINING_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.plan.requests import TrainRequest
    from mlx_agent.records.training import TrainedProcess, TrainingReceipt

LOCK_SECONDS = 30.0
INTERRUPTS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def training_id(plan: dict[str, Any]) -> str:
    """Return the receipt id of a plan: the first 16 hex digits of its hash."""
    return str(plan["preview_hash"][:16])


def receipt_files(directory: Path) -> list[Path]:
    """Return the training receipts in ``directory``, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(directory.glob("*.json"), key=lambda p: (p.stat().st_mtime_ns, p.name))


def _alive(record: TrainedProcess | None) -> bool:
    if not record or not isinstance(record.get("pid"), int) or record.get("create_time") is None:
        return False
    return process.classify(record) == "running"


def live_state(receipt: TrainingReceipt) -> str:
    """Return ``running``, ``completed``, ``failed`` or ``interrupted`` (the watcher died before recording)."""
    state = str(receipt.get("state"))
    if state != "running":
        return state
    return "running" if _alive(receipt.get("watcher")) else "interrupted"


def gates(plan: dict[str, Any], directory: Path) -> list[str]:
    """Refuse while a training of this plan, or one writing to the same adapter path, runs; return warnings."""
    warnings = []
    rid = training_id(plan)
    for path in receipt_files(directory):
        try:
            receipt = read_training_receipt(path)
        except ReceiptError:
            continue
        other = receipt.get("plan") or {}
        same_plan, same_out = path.stem == rid, other.get("adapter_path") == plan["adapter_path"]
        if not (same_plan or same_out):
            continue
        state = live_state(receipt)
        trainer_alive = _alive(receipt.get("trainer")) if receipt.get("state") == "running" else False
        if state == "running" or trainer_alive:
            raise TrainingRunning(
                f"training {path.stem} is still running and writes to {other.get('adapter_path')}",
                details={"receipt": str(path), "id": path.stem, "adapter_path": other.get("adapter_path")},
            )
        if same_plan:
            warnings.append(
                f"an earlier run of this plan ended {state}; its receipt and log {path.stem}.* are replaced"
            )
    return warnings


def _build(req: TrainRequest) -> dict[str, Any]:
    """Build the plan; a non-empty adapter directory that a running training writes to is training_running."""
    from mlx_agent.plan.training import build_training_plan  # not for status, which stays light

    try:
        return build_training_plan(req)
    except AdapterPathNotEmpty as exc:
        out = exc.details.get("adapter_path")
        gates({"preview_hash": "", "adapter_path": out}, receipts_dir("train", req.receipts_dir))
        raise


def preview(req: TrainRequest) -> tuple[dict[str, Any], list[str]]:
    """Build, gate and save the plan for review; start nothing."""
    plan = with_hash(_build(req))
    warnings = gates(plan, Path(plan["receipts_dir"]))
    save_preview(previews_dir(), plan)
    return plan, warnings


def _start(plan: dict[str, Any], path: Path, log: Path) -> TrainingReceipt:
    """Spawn the watcher, write the receipt naming it, then let it start the trainer.

    Interrupts are blocked from before the spawn until the watcher has its go, so the CLI cannot be stopped
    between creating a process and recording it. If anything fails before go, the watcher reads the end of
    its stdin instead and exits without training.
    """
    private_dir(log.parent)
    os.close(open_private(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))  # a fresh log; a planted link is refused
    log.chmod(0o600)
    import subprocess  # not for status, which stays light

    from mlx_agent.spawn import spawn

    argv = [plan["trainer"]["interpreter"], "-m", plan["watcher"]["module"], str(path)]
    saved = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        # Detached, in its own session: the watcher outlives this command; it waits on stdin for go.
        watcher = spawn(argv, plan["env"], log, plan["cwd"], stdin=subprocess.PIPE)
        assert watcher.stdin is not None
        try:
            try:
                identity = process.identity(watcher.pid)
            except ProcessLookupError:
                code = watcher.wait()
                from mlx_agent.files import log_tail

                raise LaunchFailed(
                    f"the training watcher exited with status {code} at once",
                    details={"exit_code": code, "log_path": str(log), "log_tail": log_tail(log)},
                ) from None
            receipt: TrainingReceipt = {
                "format_version": TRAINING_VERSION,
                "kind": "train",
                "id": path.stem,
                "state": "running",
                "preview_hash": plan["preview_hash"],
                "adapter_path": plan["adapter_path"],
                "log_path": str(log),
                "config_path": plan["config_path"],
                "started_at": utc_now(),
                "trainer_started_at": None,
                "finished_at": None,
                "exit_code": None,
                "reason": None,
                "watcher": {**identity, "argv": argv},
                "trainer": None,
                "adapter": None,
                "base": None,
                "plan": plan,
            }
            write_json_atomic(path, receipt)
            watcher.stdin.write(b"go")
        finally:
            watcher.stdin.close()  # without go this is the watcher's signal to exit untrained
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved)
    return receipt


def confirm(req: TrainRequest, preview_hash: str | None) -> tuple[TrainingReceipt, Path, list[str]]:
    """Start the reviewed training detached and return its receipt at once."""
    plan = reviewed_plan(lambda: _build(req), preview_hash)
    directory = Path(plan["receipts_dir"])
    path = directory / f"{training_id(plan)}.json"
    busy = LockTimeout(
        f"another lora train confirm holds {directory / 'train.lock'}",
        details={"path": str(directory / "train.lock")},
        remediation="Another lora train confirm is starting a training; retry when it has finished.",
    )
    with file_lock(directory / "train.lock", timeout=LOCK_SECONDS, busy=busy):
        warnings = gates(plan, directory)
        write_json_atomic(Path(plan["config_path"]), plan["config"])
        receipt = _start(plan, path, directory / f"{path.stem}.log")
    return receipt, path, warnings


def status_entry(path: Path) -> dict[str, Any]:
    """Return what ``lora status`` shows for one receipt: state, progress, losses, adapter and base."""
    try:
        receipt = read_training_receipt(path)
    except ReceiptError as exc:
        return {"id": path.stem, "state": "unreadable", "receipt_path": str(path), "error": exc.to_dict()}
    plan = receipt.get("plan") or {}
    state = live_state(receipt)
    progress = read_progress(Path(receipt.get("log_path") or path.with_suffix(".log")))
    total = (plan.get("hyperparameters") or {}).get("iters")
    done = progress["train"]["iteration"] if progress["train"] else 0
    trainer, watcher = receipt.get("trainer"), receipt.get("watcher")  # .get: an older or broken receipt may lack one
    base = plan.get("base") or {}
    return {
        "id": receipt.get("id", path.stem),
        "receipt_path": str(path),
        "state": state,
        "exit_code": receipt.get("exit_code"),
        "signal": receipt.get("signal"),
        "reason": receipt.get("reason")
        if state != "interrupted"
        else "the watcher ended before it could record how the training ended",
        "iterations": {"done": done, "total": total},
        "train_loss": progress["train"],
        "val_loss": progress["val"],
        "adapter_path": plan.get("adapter_path"),
        "adapter": receipt.get("adapter"),
        "base": {k: base.get(k) for k in ("kind", "path", "repo", "revision")},
        "watcher_pid": watcher.get("pid") if watcher else None,
        "trainer_pid": trainer.get("pid") if trainer else None,
        "trainer_alive": _alive(trainer) if state in ("running", "interrupted") else False,
        "preview_hash": receipt.get("preview_hash"),
        "started_at": receipt.get("started_at"),
        "finished_at": receipt.get("finished_at"),
        "log_path": receipt.get("log_path"),
    }


def status(directory: Path, receipt: str | None = None) -> list[dict[str, Any]]:
    """Return one entry per training receipt in ``directory``, or for the one receipt file given."""
    if receipt is not None:
        path = Path(receipt).expanduser().absolute()
        read_training_receipt(path)  # a missing or foreign file is an error here, not a row
        return [status_entry(path)]
    return [status_entry(p) for p in receipt_files(directory)]
