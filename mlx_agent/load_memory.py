"""What loading a model takes, and whether the machine has it now: the one admission rule.

Before every cold load the front reads the available memory afresh: it must cover the model's weights x 1.10
+ 1.5 GB for the runtime + the reserve (``min_headroom_gb``). The check only refuses when a reserve is set;
it reserves nothing (other programs can take the memory between the check and the load). `mlx-agent models`
shows the same estimate and verdict for each model it finds.
"""

from __future__ import annotations

import math
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.files import utc_now

WEIGHT_FACTOR = 1.10
RUNTIME_ALLOWANCE_BYTES = 1_500_000_000
GB = 1_000_000_000  # decimal GB, as the user types it


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
