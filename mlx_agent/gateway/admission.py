"""Memory admission before a cold load, and the policy a front persists after ``serve policy``.

Before every cold load the front reads the available memory afresh: it must cover the model's weights x 1.10
+ 1.5 GB for the runtime + the reserve (``min_headroom_gb``). The check only refuses when a reserve is set;
it reserves nothing (other programs can take the memory between the check and the load).

The persisted policy file, ``{"format_version", "min_headroom_gb", "models": {name: {"idle_timeout",
"keep_loaded"}}, "updated_at"}``, is written atomically (0600) and wins over the config's at the next start.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlx_agent.api_errors import Code
from mlx_agent.errors import FrontConfigInvalid, PolicyRejected
from mlx_agent.files import utc_now
from mlx_agent.policy import parse_policy
from mlx_agent.wire import POLICY_FILE_VERSION

if TYPE_CHECKING:
    from mlx_agent.policy import Policy

WEIGHT_FACTOR = 1.10
RUNTIME_ALLOWANCE_BYTES = 1_500_000_000
GB = 1_000_000_000  # decimal GB, as the user types it
RETRY_AFTER_S = 30


def memory_estimate(weight_bytes: int | None) -> int | None:
    """Return what loading a model takes, by the admission rule (weights x 1.10 + the runtime allowance)."""
    return None if weight_bytes is None else math.ceil(weight_bytes * WEIGHT_FACTOR) + RUNTIME_ALLOWANCE_BYTES


def memory_check(weight_bytes: int | None, reserve_gb: float, available_bytes: int | None) -> dict[str, Any]:
    """Return the dated admission estimate: whether fresh available memory covers the load plus the reserve.

    ``reason`` is None when the load may go ahead, ``memory_unknown`` when the weight size or the available
    memory is unknown, ``insufficient_headroom`` when available memory is short.
    """
    reserve_bytes = round(reserve_gb * GB)
    estimate = memory_estimate(weight_bytes)
    required = None if estimate is None else estimate + reserve_bytes
    reason: Code | None = None
    shortfall = 0
    if required is None or available_bytes is None:
        reason = Code.MEMORY_UNKNOWN
    elif available_bytes < required:
        reason = Code.INSUFFICIENT_HEADROOM
        shortfall = required - available_bytes
    return {
        "checked_at": utc_now(),
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


def policy_file(min_headroom_gb: float | None, models: dict[str, Policy]) -> dict[str, Any]:
    """Return what the policy file holds: the front's reserve and each model's idle policy."""
    return {
        "format_version": POLICY_FILE_VERSION,
        "min_headroom_gb": min_headroom_gb,
        "models": {name: {"idle_timeout": p.idle_timeout, "keep_loaded": p.keep_loaded} for name, p in models.items()},
        "updated_at": utc_now(),
    }


def read_policy_file(path: Path) -> tuple[float | None, dict[str, Policy]] | None:
    """Return the persisted reserve and per-model policies, or None without a file; refuse an unusable one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FrontConfigInvalid(f"cannot read policy file {path}: {exc.strerror}") from exc
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not str(doc.get("format_version", "")).startswith("2."):
            raise ValueError("an unsupported format_version")
        reserve = doc.get("min_headroom_gb")
        models = doc.get("models")
        if not isinstance(models, dict):
            raise ValueError("no models object")
        policies = {
            str(name): parse_policy({**entry, "min_headroom_gb": reserve})
            if isinstance(entry, dict)
            else parse_policy(entry)
            for name, entry in models.items()
        }
    except (ValueError, PolicyRejected) as exc:
        raise FrontConfigInvalid(f"policy file {path} is unusable: {exc}") from exc
    return reserve, policies
