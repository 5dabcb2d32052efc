"""What ``lora train`` and ``lora status`` do with their records (the Click CLI and the fast path alike)."""

from __future__ import annotations

from mlx_agent.cli.output import run
from mlx_agent.home import receipts_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from mlx_agent.cli.output import Result, TrainingStarted
    from mlx_agent.plan.requests import TrainRequest, TrainStatusRequest


def render(name: str) -> Callable[[Any, list[str]], None]:
    """Return the renderer ``name`` of ``cli/render.py``, imported only when a person reads the output.

    Each renderer declares the record it reads (``render_receipt`` a ``Launched``); rich is never imported here.
    """

    def show(data: Any, warnings: list[str]) -> None:
        from mlx_agent.cli import render as r

        getattr(r, name)(data, warnings)

    return show


def lora_train(req: TrainRequest, flags: dict[str, Any]) -> None:
    """Preview a LoRA training plan, or start it detached with --confirm."""

    def preview() -> Result:
        from mlx_agent.supervise.training import preview as build_preview

        plan, warnings = build_preview(req)
        return {"plan": plan, "requires_confirmation": True}, warnings

    def confirm() -> tuple[TrainingStarted, list[str]]:
        from mlx_agent.supervise.training import confirm as start

        receipt, path, warnings = start(req, flags["preview_hash"])
        return {"receipt": receipt, "receipt_path": str(path), "requires_confirmation": False}, warnings

    as_json = bool(flags["json"])
    if not flags["confirm"]:
        from mlx_agent.cli.ask import preview_and_ask

        reviewed = preview_and_ask("lora.train", as_json, "Start", preview, render("render_train_preview"))
        if reviewed is None:
            return
        flags = {**flags, "confirm": True, "preview_hash": reviewed}  # what ``confirm`` reads: the plan shown
    run("lora.train", as_json, confirm, render("render_train_started"))


def lora_status(req: TrainStatusRequest, flags: dict[str, Any]) -> None:
    """Show each training: state, iterations, last losses, adapter files and their recorded hashes."""
    from mlx_agent.supervise.training import status

    directory = receipts_dir("train", req.receipts_dir)

    def action() -> Result:
        return {"receipts_dir": str(directory), "trainings": status(directory, req.receipt)}, []

    run("lora.status", bool(flags["json"]), action, render("render_train_status"))


LORA_ACTIONS: dict[tuple[str, str], Any] = {("lora", "train"): lora_train, ("lora", "status"): lora_status}
