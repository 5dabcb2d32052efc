"""Training receipts as evidence: read one, and check that it still vouches for its base and adapter.

``serve start --training-receipt FILE`` builds on these two functions: ``load_training_receipt`` reads and
fingerprints the receipt, ``check_training_receipt`` refuses unless the training completed, the base model
is byte-for-byte the one it was trained on (by the same identity a serve plan binds) and the adapter files
still hash to what the watcher recorded. Pure: reads and hashes, writes nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from mlx_agent.errors import AdapterChanged, SourceError
from mlx_agent.errors.commands import (
    BaseModelChanged,
    ReceiptCorrupt,
    ReceiptNotFound,
    ReceiptVersionUnsupported,
    TrainingIncomplete,
)
from mlx_agent.wire import TRAINING_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from mlx_agent.records.training import TrainingReceipt

# plan.adapter's CONFIG and WEIGHTS; spelled out so that reading a receipt (lora status) imports nothing more.
ADAPTER_FILES = ("adapter_config.json", "adapters.safetensors")
REQUIRED = ("format_version", "kind", "state", "plan")
NOT_FOUND_REMEDY = "Check the path; `mlx-agent lora status` lists the training receipts and where they are."
CORRUPT_REMEDY = (
    "Pass a receipt written by `mlx-agent lora train --confirm` (see `mlx-agent lora status`); details.path is not one."
)


def _corrupt(path: Path, why: str) -> ReceiptCorrupt:
    return ReceiptCorrupt(
        f"{path} is not a usable training receipt: {why}", details={"path": str(path)}, remediation=CORRUPT_REMEDY
    )


def parse_training_receipt(path: Path, raw: bytes) -> TrainingReceipt:
    """Return the receipt in ``raw``, refusing one that is not JSON, not a training receipt, or too new."""
    try:
        data = parsed = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _corrupt(path, f"not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or any(k not in data for k in REQUIRED):
        raise _corrupt(path, f"it lacks one of {', '.join(REQUIRED)}")
    if data["kind"] != "train":
        raise _corrupt(path, f"it is a {data['kind']!r} receipt, not a training one")
    major = str(data["format_version"]).split(".")[0]
    if major != TRAINING_VERSION.split(".")[0]:
        raise ReceiptVersionUnsupported(
            f"receipt {path} has format_version {data['format_version']}",
            details={"path": str(path), "format_version": data["format_version"]},
        )
    if not isinstance(data["plan"], dict):
        raise _corrupt(path, "its plan is not an object")
    receipt: TrainingReceipt = parsed  # typed once here; readers of older receipts still use .get for the rest
    return receipt


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise ReceiptNotFound(
            f"no training receipt at {path}", details={"path": str(path)}, remediation=NOT_FOUND_REMEDY
        ) from None
    except OSError as exc:
        raise _corrupt(path, f"unreadable ({exc.strerror or exc})") from exc


def read_training_receipt(path: Path) -> TrainingReceipt:
    """Return the training receipt at ``path`` (see ``parse_training_receipt`` for the refusals)."""
    return parse_training_receipt(path, _read_bytes(path))


def load_training_receipt(path: str) -> tuple[TrainingReceipt, str]:
    """Return the parsed training receipt at ``path`` and the sha256 hex of its exact bytes.

    A relative ``path`` resolves from the current working directory. Raises ``receipt_not_found``,
    ``receipt_corrupt`` (unreadable, not JSON, not a training receipt) or ``receipt_version_unsupported``.
    """
    where = Path(path).expanduser().absolute()
    raw = _read_bytes(where)
    return parse_training_receipt(where, raw), hashlib.sha256(raw).hexdigest()


def _absolute(raw: str) -> Path:
    # Receipts written before paths were made absolute hold them relative to where training ran; the best
    # available reading is the current working directory, and the content hashes must still match.
    return Path(raw).expanduser().absolute()


def _base_now(pinned: Mapping[str, Any], receipt_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    from mlx_agent.plan.source import resolve_path_source, resolve_repo_source

    try:
        if pinned.get("kind") == "hf_cache":
            return resolve_repo_source(str(pinned["repo"]))
        return resolve_path_source(str(_absolute(str(pinned["path"]))))
    except SourceError as exc:
        raise BaseModelChanged(
            f"the base model the adapter was trained on is no longer usable: {exc.message}",
            details={
                "base": pinned.get("path"),
                "receipt_dir": str(receipt_dir),
                "cause": exc.to_dict(),
                "changes": None,
            },
        ) from exc


def _check_base(receipt: TrainingReceipt, receipt_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    pinned = receipt.get("base") or receipt["plan"].get("base")
    if not isinstance(pinned, dict) or "path" not in pinned:
        raise _corrupt(receipt_dir / f"{receipt.get('id', '?')}.json", "it records no base model identity")
    from mlx_agent.canonical import MISSING, plan_diff

    now, config = _base_now(pinned, receipt_dir)
    expected = dict(pinned)
    if expected.get("kind") == "path":
        expected["path"] = str(_absolute(str(expected["path"])).resolve())
    # A receipt written before ctime_ns was bound pins weights without it: compare what it pinned.
    changes = [c for c in plan_diff(expected, now) if not (c["field"].endswith(".ctime_ns") and c["old"] is MISSING)]
    if changes:
        raise BaseModelChanged(
            f"the base model changed since training: {len(changes)} field(s) differ",
            details={"base": now["path"], "receipt_dir": str(receipt_dir), "changes": changes},
        )
    return now, config


def _check_adapter(receipt: TrainingReceipt, receipt_dir: Path) -> dict[str, Any]:
    adapter: Any = receipt.get("adapter")
    files = adapter.get("files") if isinstance(adapter, dict) else None
    if not isinstance(files, dict) or any(not isinstance(files.get(n), dict) for n in ADAPTER_FILES):
        raise _corrupt(
            receipt_dir / f"{receipt.get('id', '?')}.json",
            f"a completed training must record {' and '.join(ADAPTER_FILES)}",
        )
    from mlx_agent.plan.adapter import file_record

    directory = _absolute(str(adapter["path"]))
    now: dict[str, Any] = {}
    changes = []
    for name in ADAPTER_FILES:
        path = directory / name
        recorded = {"sha256": files[name].get("sha256"), "size": files[name].get("size")}
        if not path.is_file():
            changes.append({"field": f"{name}", "old": recorded, "new": "<absent>"})
            continue
        record = file_record(path)
        now[name] = {"sha256": record["sha256"], "size": record["size"]}
        for key in ("size", "sha256"):
            if now[name][key] != recorded[key]:
                changes.append({"field": f"{name}.{key}", "old": recorded[key], "new": now[name][key]})
    if changes:
        raise AdapterChanged(
            f"the adapter files in {directory} changed since training recorded them",
            details={"adapter_path": str(directory), "receipt_dir": str(receipt_dir), "changes": changes},
        )
    return {"path": str(directory), "files": now}


def check_training_receipt(receipt: TrainingReceipt, receipt_dir: Path) -> dict[str, Any]:
    """Return the base and adapter a completed training receipt vouches for, re-derived and re-hashed now.

    ``receipt_dir`` is the directory the receipt was read from; it is named in error details. Relative paths
    inside older receipts resolve from the current working directory. Raises ``training_incomplete`` unless
    the receipt's state is ``completed``, ``base_model_changed`` if the base identity differs from the pinned
    one (``details.changes``, field by field), and ``adapter_changed`` if an adapter file's size or sha256
    differs or it is missing. Returns ``{"base": source record, "base_config": config.json,
    "adapter": {"path": absolute dir, "files": {name: {"sha256", "size"}}}}``.
    """
    state = receipt.get("state")
    if state != "completed":
        raise TrainingIncomplete(
            f"training {receipt.get('id', '?')} has state {state!r}, not 'completed'",
            details={
                "state": state,
                "exit_code": receipt.get("exit_code"),
                "reason": receipt.get("reason"),
                "receipt_dir": str(receipt_dir),
            },
        )
    base, config = _check_base(receipt, receipt_dir)
    adapter = _check_adapter(receipt, receipt_dir)
    return {"base": base, "base_config": config, "adapter": adapter}
