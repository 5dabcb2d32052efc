"""The gateway's live policy (idle unload, keep-loaded, memory reserve) and the admission check before a cold load.

A policy is replaced whole, never patched: ``{"idle_timeout_s": S, "keep_loaded": B, "min_headroom_gb": G|null}``.
``idle_timeout_s`` 0 disables idle unload; ``keep_loaded`` true also disables it (manual unload still works);
``min_headroom_gb`` null disables admission. The live policy is persisted in a private file,
``{"format_version": "1.0", "policy": {...}, "updated_at": ISO}``, written atomically (0600).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

POLICY_FILE_VERSION = "1.0"
POLICY_KEYS = ("idle_timeout_s", "keep_loaded", "min_headroom_gb")

# Admission: fresh available memory must cover weights x 1.10 + 1.5 GB runtime allowance + the reserve.
WEIGHT_FACTOR = 1.10
RUNTIME_ALLOWANCE_BYTES = 1_500_000_000
GB = 1_000_000_000  # decimal GB, as the user types it
RETRY_AFTER_S = 30


class PolicyError(ValueError):
    """A policy object is malformed; the message names the field."""


@dataclass(frozen=True)
class Policy:
    """When the gateway unloads its worker on its own, and how much memory must stay free after a load."""

    idle_timeout_s: float = 0
    keep_loaded: bool = False
    min_headroom_gb: float | None = None

    @property
    def idle_unload(self) -> bool:
        """Say whether the gateway unloads the worker after ``idle_timeout_s`` without requests."""
        return not self.keep_loaded and self.idle_timeout_s > 0

    def to_json(self) -> dict[str, Any]:
        """Return the policy as its JSON object."""
        return asdict(self)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_policy(raw: object) -> Policy:
    """Return the policy in ``raw``; raise ``PolicyError`` unless it has exactly the three keys, well typed."""
    if not isinstance(raw, dict):
        raise PolicyError("policy must be a JSON object")
    missing = [k for k in POLICY_KEYS if k not in raw]
    unknown = sorted(set(raw) - set(POLICY_KEYS))
    if missing:
        raise PolicyError(f"policy is replaced whole; missing {', '.join(missing)}")
    if unknown:
        raise PolicyError(f"unknown policy field {', '.join(unknown)}")
    idle, keep, reserve = raw["idle_timeout_s"], raw["keep_loaded"], raw["min_headroom_gb"]
    if not _number(idle) or idle < 0:
        raise PolicyError("idle_timeout_s must be a number of seconds >= 0 (0 disables idle unload)")
    if not isinstance(keep, bool):
        raise PolicyError("keep_loaded must be true or false")
    if reserve is not None and (not _number(reserve) or reserve < 0):
        raise PolicyError("min_headroom_gb must be null (no admission check) or a number of GB >= 0")
    return Policy(idle_timeout_s=idle, keep_loaded=keep, min_headroom_gb=reserve)


def read_policy_file(path: Path) -> Policy | None:
    """Return the persisted policy, or None when there is no file; raise ``PolicyError`` if it is unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PolicyError(f"cannot read policy file {path}: {exc.strerror}") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PolicyError(f"policy file {path} is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not str(doc.get("format_version", "")).startswith("1."):
        raise PolicyError(f"policy file {path} has an unsupported format_version")
    return parse_policy(doc.get("policy"))


def policy_document(policy: Policy) -> dict[str, Any]:
    """Return what the policy file holds for ``policy``."""
    return {"format_version": POLICY_FILE_VERSION, "policy": policy.to_json(), "updated_at": now_iso()}


def now_iso() -> str:
    """Return the current UTC time as an ISO 8601 string with seconds precision."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_from_timestamp(ts: float | None) -> str | None:
    """Return a Unix timestamp as ISO 8601 UTC, or None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def memory_check(weight_bytes: int | None, reserve_gb: float, available_bytes: int | None) -> dict[str, Any]:
    """Return the dated admission estimate: whether fresh available memory covers the load plus the reserve.

    ``reason`` is None when the load may go ahead, ``memory_unknown`` when the weight size or the available
    memory is unknown, ``insufficient_headroom`` when available memory is short.
    """
    reserve_bytes = round(reserve_gb * GB)
    required: int | None = None
    if weight_bytes is not None:
        required = math.ceil(weight_bytes * WEIGHT_FACTOR) + RUNTIME_ALLOWANCE_BYTES + reserve_bytes
    reason: str | None = None
    shortfall = 0
    if required is None or available_bytes is None:
        reason = "memory_unknown"
    elif available_bytes < required:
        reason = "insufficient_headroom"
        shortfall = required - available_bytes
    return {
        "checked_at": now_iso(),
        "available_bytes": available_bytes,
        "required_bytes": required,
        "weight_bytes": weight_bytes,
        "weight_factor": WEIGHT_FACTOR,
        "runtime_allowance_bytes": RUNTIME_ALLOWANCE_BYTES,
        "reserve_bytes": reserve_bytes,
        "shortfall_bytes": shortfall,
        "ok": reason is None,
        "reason": reason,
    }


def available_memory() -> int | None:
    """Return the OS's available memory in bytes, read fresh, or None when it cannot be read."""
    try:
        import psutil

        available = int(psutil.virtual_memory().available)
    except Exception:  # psutil raises platform-specific errors; any failure means "unknown"
        return None
    return available if available >= 0 else None
