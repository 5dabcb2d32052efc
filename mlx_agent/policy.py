"""When a front unloads a model on its own, and how much memory must stay free: the policy, checked in one place.

A policy is replaced whole, never patched: ``{"idle_timeout": S, "keep_loaded": B, "min_headroom_gb": G|null}``.
``idle_timeout`` (seconds) 0 disables idle unload; ``keep_loaded`` true disables it too (a manual unload still
works); ``min_headroom_gb`` null disables the memory check before a cold load. The plan builds the reviewed
policy with ``parse_policy`` (from ``--idle-timeout``, ``--keep-loaded``, ``--min-headroom-gb``), ``serve
policy`` builds its replacement with it, and the front reads its config, its persisted policy file and the
control request with it: every rule is here.

Plain classes and no imports beyond the error tree: previews and ``serve policy`` import this.
"""

from __future__ import annotations

from mlx_agent.errors import PolicyRejected

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

POLICY_KEYS = ("idle_timeout", "keep_loaded", "min_headroom_gb")


class Policy:
    """One front's policy (immutable by convention: replace it, never change it)."""

    __slots__ = ("idle_timeout", "keep_loaded", "min_headroom_gb")

    def __init__(
        self, idle_timeout: float = 0, keep_loaded: bool = False, min_headroom_gb: float | None = None
    ) -> None:
        self.idle_timeout = idle_timeout
        self.keep_loaded = keep_loaded
        self.min_headroom_gb = min_headroom_gb

    @property
    def idle_unload(self) -> bool:
        """Say whether the front unloads an idle model after ``idle_timeout`` seconds."""
        return not self.keep_loaded and self.idle_timeout > 0

    def to_json(self) -> dict[str, Any]:
        """Return the policy as its JSON object (``records.front.PolicyDocument``: the idle policy and the floor)."""
        return {
            "idle_timeout": self.idle_timeout,
            "keep_loaded": self.keep_loaded,
            "min_headroom_gb": self.min_headroom_gb,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(tuple(self.to_json().values()))

    def __repr__(self) -> str:
        return f"Policy({self.to_json()})"


def _number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and value == value
        and value not in (float("inf"), float("-inf"))
    )


def _rejected(message: str, field: str) -> PolicyRejected:
    return PolicyRejected(message, details={"field": field})


def parse_policy(raw: object) -> Policy:
    """Return the policy in ``raw``; raise ``PolicyRejected`` unless it has exactly the three keys, well typed."""
    if not isinstance(raw, dict):
        raise _rejected("policy must be a JSON object", "policy")
    missing = [k for k in POLICY_KEYS if k not in raw]
    unknown = sorted(set(raw) - set(POLICY_KEYS))
    if missing:
        raise _rejected(f"policy is replaced whole; missing {', '.join(missing)}", missing[0])
    if unknown:
        raise _rejected(f"unknown policy field {', '.join(unknown)}", unknown[0])
    idle, keep, reserve = raw["idle_timeout"], raw["keep_loaded"], raw["min_headroom_gb"]
    if not _number(idle) or idle < 0:
        raise _rejected("idle_timeout must be a number of seconds >= 0 (0 disables idle unload)", "idle_timeout")
    if not isinstance(keep, bool):
        raise _rejected("keep_loaded must be true or false", "keep_loaded")
    if reserve is not None and (not _number(reserve) or reserve < 0):
        raise _rejected("min_headroom_gb must be null (no memory check) or a number of GB >= 0", "min_headroom_gb")
    return Policy(idle_timeout=idle, keep_loaded=keep, min_headroom_gb=reserve)


def policy_from_options(idle_timeout: float | None, keep_loaded: bool, min_headroom_gb: float | None) -> Policy:
    """Return the policy the command-line options ask for (an omitted --idle-timeout is 0: never)."""
    return parse_policy(
        {"idle_timeout": idle_timeout or 0, "keep_loaded": keep_loaded, "min_headroom_gb": min_headroom_gb}
    )
