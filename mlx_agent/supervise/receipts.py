"""Serve receipts: what was launched, by whom it can be recognised, and where it logs."""

from __future__ import annotations

import json
from pathlib import Path

from mlx_agent import FORMAT_VERSION
from mlx_agent.errors import ReceiptCorrupt, ReceiptNotFound, ReceiptVersionUnsupported
from mlx_agent.files import write_json_atomic

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REQUIRED = ("format_version", "port")
PROCESS_FIELDS = ("pid", "pgid", "create_time", "argv")
UNIT_SUPERVISORS = ("launchd", "systemd")


def is_unit(receipt: dict[str, Any]) -> bool:
    """Say whether a receipt records an installed launchd/systemd unit rather than a process of ours."""
    return receipt.get("supervisor") in UNIT_SUPERVISORS


def plan_receipt(plan: dict[str, Any], supervisor: str, log: str) -> dict[str, Any]:
    """Return the fields every serve receipt copies from its plan, whoever supervises the server."""
    return {
        "format_version": FORMAT_VERSION,
        "kind": "serve",
        "supervisor": supervisor,
        "port": plan["port"],
        "host": plan["host"],
        "base_url": plan["base_url"],
        "runtime": plan["runtime"]["name"],
        "model": plan["source"]["path"],
        "repo": plan["source"].get("repo"),
        "adapter": plan.get("adapter"),
        "argv": plan["argv"],
        "log_path": log,
        "preview_hash": plan["preview_hash"],
        "plan": plan,
    }


def receipt_path(directory: Path, port: int) -> Path:
    """Return where the receipt of ``port`` lives."""
    return directory / f"{port}.json"


def log_path(directory: Path, port: int) -> Path:
    """Return the log file of the server on ``port``, beside its receipt."""
    return directory / f"{port}.log"


def _check(path: Path, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
        raise ReceiptCorrupt(f"receipt {path} lacks required fields", details={"path": str(path)})
    if is_unit(data):
        if not isinstance(data.get("unit"), dict) or not isinstance(data["unit"].get("path"), str):
            raise ReceiptCorrupt(f"receipt {path} lacks its unit record", details={"path": str(path)})
        return data
    if any(k not in data for k in PROCESS_FIELDS):
        raise ReceiptCorrupt(f"receipt {path} lacks required fields", details={"path": str(path)})
    major = str(data["format_version"]).split(".")[0]
    if major != FORMAT_VERSION.split(".")[0]:
        raise ReceiptVersionUnsupported(
            f"receipt {path} has format_version {data['format_version']}",
            details={"path": str(path), "format_version": data["format_version"]})
    types_ok = (isinstance(data["pid"], int) and isinstance(data["pgid"], int)
                and isinstance(data["create_time"], int | float) and isinstance(data["argv"], list))
    if not types_ok:
        raise ReceiptCorrupt(f"receipt {path} has fields of the wrong type", details={"path": str(path)})
    return data


def read_receipt(path: Path) -> dict[str, Any]:
    """Return a receipt, refusing one that is missing, unparsable or of an unknown major version."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReceiptNotFound(f"no receipt at {path}", details={"path": str(path)}) from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReceiptCorrupt(f"receipt {path} is not valid JSON: {exc}", details={"path": str(path)}) from exc
    return _check(path, data)


def receipt_files(directory: Path) -> list[Path]:
    """Return the receipt files in ``directory``, ordered by port."""
    if not directory.is_dir():
        return []
    paths = [p for p in directory.glob("*.json") if p.stem.isdigit()]
    return sorted(paths, key=lambda p: int(p.stem))


def write_receipt(directory: Path, receipt: dict[str, Any]) -> Path:
    """Write a receipt atomically (temp, fsync, rename, mode 0600) and return its path."""
    path = receipt_path(directory, int(receipt["port"]))
    write_json_atomic(path, receipt)
    return path
