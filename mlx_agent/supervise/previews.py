"""Saved previews, so that a stale confirm can show each field that changed since the review."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from mlx_agent.canonical import plan_diff, with_hash
from mlx_agent.errors import AdapterChanged, PreviewStale, RuntimeChanged
from mlx_agent.errors.commands import PreviewHashRequired
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
        details: dict[str, Any] = {"expected": preview_hash, "actual": plan["preview_hash"], "changes": changes}
        # A changed adapter gets its own code: it is the one change a reviewer must not wave through; so does the
        # front's interpreter (a venv's link swapped for a script since the preview), as a worker's would.
        adapter_moved = changes is not None and any(".adapter." in "." + c["field"] for c in changes)
        interpreter_moved = changes is not None and any(c["field"] == "front.interpreter_sha256" for c in changes)
        error: type[PreviewStale] = AdapterChanged if adapter_moved else PreviewStale
        if interpreter_moved and not adapter_moved and old is not None:
            error, details["changed"] = RuntimeChanged, [interpreter_change(old)]
        raise error(f"the plan no longer matches --preview-hash: {summary}", details=details)
    return plan


def interpreter_change(reviewed: Mapping[str, Any]) -> dict[str, Any]:
    """Say how the front's interpreter moved since ``reviewed``: its argv[0] links lead elsewhere, or its file changed.

    The file argv[0] led to at review is the one the plan's workers were bound to start by (their
    ``executable``) when they run the same argv[0], as they do unless the runtime is another environment's.
    """
    import os

    argv0 = str(reviewed["argv"][0])
    target = os.path.realpath(argv0)
    workers = [m.get("worker") or {} for m in reviewed.get("models") or []]
    same = [w for w in workers if (w.get("argv") or [None])[0] == argv0 and "executable" in w]
    earlier = same[0]["executable"] if same else None
    reason = "link_changed" if earlier is not None and earlier != target else "content_changed"
    return {"path": argv0, "expected_target": earlier, "target": target, "reason": reason}
