"""Serve receipts: what was launched, by whom it can be recognised, and where it logs."""

from __future__ import annotations

import json
import os
from pathlib import Path

from mlx_agent.errors import StateDirUnsafe
from mlx_agent.errors.commands import ReceiptCorrupt, ReceiptNotFound, ReceiptVersionUnsupported
from mlx_agent.files import open_private, sweep_stale_temps, write_json_atomic
from mlx_agent.port_files import PortFiles, is_receipt_name
from mlx_agent.wire import PLAN_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from typing_extensions import TypeIs

    from mlx_agent.records.plan import ServePlan
    from mlx_agent.records.receipt import Receipt, ServeReceipt

REQUIRED = ("format_version", "port")
PROCESS_FIELDS = ("pid", "pgid", "create_time", "argv")
UNIT_SUPERVISORS = ("launchd", "systemd")


# Receipts written by 0.2.0 named the two acceleration records after their options, and a model's names
# otherwise than the flags; readers see the seed's names (``decode_profile``, ``prefill_kernel``) and the
# flags' (``served_model_name``, ``alias``) whichever wrote the receipt.
RENAMED_MODEL_KEYS = {
    "prompt_lookup": "decode_profile",
    "m5_prefill": "prefill_kernel",
    "name": "served_model_name",
    "aliases": "alias",
}
# 0.2.0's kept prompt cache recorded its limit in bytes; it is --prompt-cache-disk-gb's GB now (status reads it).
OLD_DISK_LIMIT = "disk_limit_bytes"

# Readers accept these major versions: 3 (the seed's record names, a null max_tokens), 2 (every server has a
# front) and 1 (a plain server or a JIT gateway).
FRONT_MAJORS = ("2", "3")  # a server with a front and its plan embedded
READABLE_MAJORS = ("1", *FRONT_MAJORS)


def is_unit(receipt: Receipt) -> bool:
    """Say whether a receipt records an installed launchd/systemd unit rather than a process of ours."""
    return receipt.get("supervisor") in UNIT_SUPERVISORS


def has_front(receipt: Receipt) -> TypeIs[ServeReceipt]:
    """Say whether a receipt's server is a front (format 2.x and later; 1.x had none).

    ``read_receipt`` checked that such a receipt has the plan, front and model lists its readers use.
    """
    major = str(receipt.get("format_version", "")).split(".")[0]
    return major in FRONT_MAJORS and isinstance(receipt.get("plan"), dict)


def plan_receipt(plan: ServePlan, supervisor: str, log: str) -> ServeReceipt:
    """Return the fields every serve receipt copies from its plan, whoever supervises the server."""
    return {
        "format_version": PLAN_VERSION,
        "kind": "serve",
        "supervisor": supervisor,
        "port": plan["port"],
        "host": plan["host"],
        "base_url": plan["base_url"],
        "models": [
            {
                "served_model_name": m["served_model_name"],
                "alias": m["alias"],
                "runtime": m["runtime"]["name"],
                "model": m["source"]["path"],
                "repo": m["source"].get("repo"),
                "adapter": m["adapter"],
                "decode_profile": m["decode_profile"],
                "prefill_kernel": m["prefill_kernel"],
            }
            for m in plan["models"]
        ],
        "argv": plan["argv"],
        "log_path": log,
        "preview_hash": plan.get("preview_hash", ""),
        "plan": plan,
    }


def receipt_path(directory: Path, port: int) -> Path:
    """Return where the receipt of ``port`` lives."""
    return PortFiles(directory, port).receipt


def log_path(directory: Path, port: int) -> Path:
    """Return the log file of the server on ``port``, beside its receipt."""
    return PortFiles(directory, port).log


def _check(path: Path, json_value: Any) -> Receipt:
    """Return a parsed receipt as the record it is, once the fields its readers rely on are there."""
    data = json_value
    if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
        raise ReceiptCorrupt(f"receipt {path} lacks required fields", details={"path": str(path)})
    _current_names(data)
    receipt: Receipt = json_value  # typed here, once; each check below refuses what its readers could not use
    if has_front(receipt) and not _front_shaped(receipt):
        raise ReceiptCorrupt(f"receipt {path} lacks its plan's front or models", details={"path": str(path)})
    if is_unit(receipt):
        if not isinstance(data.get("unit"), dict) or not isinstance(data["unit"].get("path"), str):
            raise ReceiptCorrupt(f"receipt {path} lacks its unit record", details={"path": str(path)})
        return receipt
    if any(k not in data for k in PROCESS_FIELDS):
        raise ReceiptCorrupt(f"receipt {path} lacks required fields", details={"path": str(path)})
    major = str(data["format_version"]).split(".")[0]
    if major not in READABLE_MAJORS:
        raise ReceiptVersionUnsupported(
            f"receipt {path} has format_version {data['format_version']}",
            details={"path": str(path), "format_version": data["format_version"]},
        )
    types_ok = (
        isinstance(data["pid"], int)
        and isinstance(data["pgid"], int)
        and isinstance(data["create_time"], int | float)
        and isinstance(data["argv"], list)
    )
    if not types_ok:
        raise ReceiptCorrupt(f"receipt {path} has fields of the wrong type", details={"path": str(path)})
    return receipt


def _front_shaped(receipt: ServeReceipt) -> bool:
    """Say whether a front's receipt has the lists and the front record that status, stop and control read."""
    plan: Any = receipt["plan"]
    return (
        isinstance(receipt.get("models"), list)
        and isinstance(plan.get("models"), list)
        and isinstance(plan.get("front"), dict)
    )


def _current_names(data: dict[str, Any]) -> None:
    """Rename an older receipt's model keys (``RENAMED_MODEL_KEYS``, the prompt cache's limit) in place.

    Both the receipt's models and its plan's are renamed.
    """
    plan = data.get("plan")
    lists = [data.get("models"), plan.get("models") if isinstance(plan, dict) else None]
    for model in (m for models in lists if isinstance(models, list) for m in models if isinstance(m, dict)):
        for old, new in RENAMED_MODEL_KEYS.items():
            if old in model and new not in model:
                model[new] = model.pop(old)
        kept = model.get("prompt_cache")
        if isinstance(kept, dict) and isinstance(kept.get(OLD_DISK_LIMIT), int) and "disk_gb" not in kept:
            kept["disk_gb"] = kept.pop(OLD_DISK_LIMIT) / 1e9


def read_receipt(path: Path) -> Receipt:
    """Return a receipt, refusing one that is missing, unparsable or of an unknown major version."""
    try:
        fd = open_private(path, os.O_RDONLY)  # a link, or a file another user wrote, is refused
    except FileNotFoundError:
        raise ReceiptNotFound(f"no receipt at {path}", details={"path": str(path)}) from None
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read().decode("utf-8", "replace")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReceiptCorrupt(f"receipt {path} is not valid JSON: {exc}", details={"path": str(path)}) from exc
    return _check(path, data)


def receipt_files(directory: Path) -> list[Path]:
    """Return the receipt files in ``directory``, ordered by port."""
    if not directory.is_dir():
        return []
    try:
        names = os.listdir(directory)  # not glob, which reads an unreadable directory as an empty one
    except PermissionError:
        raise StateDirUnsafe(
            f"{directory} cannot be listed (mode {directory.stat().st_mode & 0o777:o}): its servers are unknown",
            details={"path": str(directory)},
        ) from None
    paths = [directory / n for n in names if is_receipt_name(n)]
    return sorted(paths, key=lambda p: int(p.stem))


def write_receipt(directory: Path, receipt: ServeReceipt) -> Path:
    """Write a receipt atomically (temp, fsync, rename, mode 0600) and return its path.

    The temporary files a killed writer left in ``directory`` (a CLI SIGKILLed while it wrote a receipt or a
    front's config: ``.<port>.front.json.<pid>.<hex>.tmp``) are removed first, those of dead writers only
    (``files.stale_temps``): every confirm sweeps them.
    """
    sweep_stale_temps(directory)
    path = receipt_path(directory, int(receipt["port"]))
    write_json_atomic(path, receipt)
    return path
