"""Saved previews, so that a stale confirm can show each field that changed since the review."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from mlx_agent.canonical import plan_diff, with_hash
from mlx_agent.errors import AdapterChanged, PreviewHashRequired, PreviewStale
from mlx_agent.files import write_json_atomic
from mlx_agent.home import previews_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from mlx_agent.canonical import Plan

KEEP = 200


def save_preview(directory: Path, plan: Mapping[str, Any]) -> None:
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


def name_models(changes: list[dict[str, Any]]) -> list[str]:
    """Add ``model`` to each change inside a model of the plan (``models[NAME]....``); return the names changed."""
    named: list[str] = []
    for change in changes:
        field = change["field"]
        if not field.startswith("models["):
            continue
        name = field[len("models[") :].split("]", 1)[0]
        change["model"] = name
        if name not in named:
            named.append(name)
    return named


def reviewed_plan(build: Callable[[], Plan], preview_hash: str | None) -> Plan:
    """Rebuild a plan with its hash and return it if that hash is the reviewed one; otherwise say what changed."""
    if not preview_hash:
        raise PreviewHashRequired("--confirm needs the --preview-hash of a reviewed preview")
    plan = with_hash(build())
    if plan["preview_hash"] != preview_hash:
        old = load_preview(previews_dir(), preview_hash)
        changes = plan_diff(old, plan) if old is not None else None
        summary = (
            f"{len(changes)} plan field(s) changed since the preview"
            if changes is not None
            else "the reviewed preview is not stored here, so the changes cannot be listed"
        )
        if changes is not None:
            named = name_models(changes)
            if named:
                summary += f" (models: {', '.join(named)})"
        # A changed adapter gets its own code: it is the one change a reviewer must not wave through.
        adapter_moved = changes is not None and any(".adapter." in "." + c["field"] for c in changes)
        error = AdapterChanged if adapter_moved else PreviewStale
        raise error(
            f"the plan no longer matches --preview-hash: {summary}",
            details={"expected": preview_hash, "actual": plan["preview_hash"], "changes": changes},
        )
    return plan
