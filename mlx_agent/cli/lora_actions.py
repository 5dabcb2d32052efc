"""What ``lora train`` and ``lora status`` do once their options are parsed (Click and the fast path alike)."""

from __future__ import annotations

from mlx_agent.cli.output import run
from mlx_agent.home import receipts_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.cli.output import Result

TRAIN_FIELDS = ("path", "repo", "data", "adapter_path", "iters", "batch_size", "learning_rate", "num_layers", "rank",
                "scale", "dropout", "fine_tune_type", "max_seq_length", "seed", "steps_per_report", "steps_per_eval",
                "val_batches", "save_every", "mask_prompt", "receipts_dir")


def _render(name: str) -> Any:
    def render(data: dict[str, Any], warnings: list[str]) -> None:
        from mlx_agent.cli import render as r

        getattr(r, name)(data, warnings)

    return render


def lora_train(opts: dict[str, Any]) -> None:
    """Preview a LoRA training plan, or start it detached with --confirm."""
    from mlx_agent.plan.training import TrainRequest

    req = TrainRequest(**{k: opts[k] for k in TRAIN_FIELDS})

    def preview() -> Result:
        from mlx_agent.supervise.training import preview as build_preview

        plan, warnings = build_preview(req)
        return {"plan": plan, "requires_confirmation": True}, warnings

    def confirm() -> Result:
        from mlx_agent.supervise.training import confirm as start

        receipt, path, warnings = start(req, opts["preview_hash"])
        return {"receipt": receipt, "receipt_path": str(path), "requires_confirmation": False}, warnings

    if opts["confirm"]:
        run("lora.train", bool(opts["as_json"]), confirm, _render("render_train_started"))
    else:
        run("lora.train", bool(opts["as_json"]), preview, _render("render_train_preview"))


def lora_status(opts: dict[str, Any]) -> None:
    """Show each training: state, iterations, last losses, adapter files and their recorded hashes."""
    from mlx_agent.supervise.training import status

    directory = receipts_dir("train", opts.get("receipts_dir"))

    def action() -> Result:
        return {"receipts_dir": str(directory), "trainings": status(directory, opts["receipt"])}, []

    run("lora.status", bool(opts["as_json"]), action, _render("render_train_status"))


LORA_ACTIONS = {("lora", "train"): lora_train, ("lora", "status"): lora_status}
