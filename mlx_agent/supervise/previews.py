"""Saved previews, so that a stale confirm can show each field that changed since the review."""

from __future__ import annotations

import json
from pathlib import Path

from mlx_agent.supervise.atomic import write_json_atomic

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

KEEP = 200


def save_preview(directory: Path, plan: dict[str, Any]) -> None:
    """Keep ``plan`` under its hash, pruning all but the most recent previews."""
    write_json_atomic(directory / f"{plan['preview_hash']}.json", plan)
    saved = sorted(directory.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in saved[KEEP:]:
        old.unlink(missing_ok=True)


def load_preview(directory: Path, preview_hash: str) -> dict[str, Any] | None:
    """Return the plan previewed under ``preview_hash``, or None if it was not kept here."""
    if not all(c in "0123456789abcdef" for c in preview_hash):
        return None
    try:
        data = json.loads((directory / f"{preview_hash}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
