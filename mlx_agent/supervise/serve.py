"""Starting a server: preview, then confirm (gates, launch, readiness, receipt) under the port lock."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from mlx_agent import FORMAT_VERSION
from mlx_agent.errors import (
    LaunchInterrupted,
    PortClaimed,
    PortInUse,
    PreviewHashRequired,
    PreviewStale,
)
from mlx_agent.home import previews_dir, wired_dir
from mlx_agent.plan.canonical import plan_diff, with_hash
from mlx_agent.plan.serve_plan import ServeRequest, build_serve_plan, model_ids
from mlx_agent.plan.wired import claims_on_port, read_wired
from mlx_agent.supervise import process
from mlx_agent.supervise.locks import port_lock
from mlx_agent.supervise.ports import port_is_free
from mlx_agent.supervise.previews import load_preview, save_preview
from mlx_agent.supervise.readiness import Tick, wait_ready
from mlx_agent.supervise.receipts import log_path, read_receipt, receipt_path, write_receipt

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Any

def _now() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).isoformat(timespec="milliseconds")


def gates(plan: dict[str, Any], directory: Path, *, cleanup: bool) -> list[str]:
    """Refuse a port that is ours and live, claimed by a wired config, or bound by anyone; return warnings.

    With ``cleanup`` a receipt whose process has gone is removed (confirm does this, preview only reports).
    """
    port = plan["port"]
    warnings: list[str] = []
    path = receipt_path(directory, port)
    if path.exists():
        receipt = read_receipt(path)
        state = process.classify(receipt)
        if state == "running":
            raise PortInUse(f"port {port} already runs a server of ours (pid {receipt['pid']})",
                            details={"port": port, "pid": receipt["pid"], "receipt": str(path)})
        if cleanup:
            path.unlink(missing_ok=True)
            warnings.append(f"removed the stale receipt of port {port} (its process is {state})")
        else:
            warnings.append(f"the receipt of port {port} is stale (its process is {state}); confirm replaces it")
    configs, wired_warnings = read_wired(wired_dir())
    warnings.extend(wired_warnings)
    claims = claims_on_port(configs, port, plan["runtime"]["name"], model_ids(plan))
    if claims:
        raise PortClaimed(f"port {port} is claimed by a wired config for another server",
                          details={"port": port, "claims": claims})
    if not port_is_free(port, plan["host"]):
        raise PortInUse(f"port {port} on {plan['host']} is already bound by another program",
                        details={"port": port})
    return warnings


def preview(req: ServeRequest, directory: Path) -> tuple[dict[str, Any], list[str]]:
    """Build, gate and save the plan for review; start nothing."""
    plan = with_hash(build_serve_plan(req))
    warnings = gates(plan, directory, cleanup=False)
    save_preview(previews_dir(), plan)
    return plan, warnings


def check_preview(req: ServeRequest, preview_hash: str | None) -> dict[str, Any]:
    """Rebuild the plan and return it if its hash is the reviewed one; otherwise say what changed."""
    if not preview_hash:
        raise PreviewHashRequired("--confirm needs the --preview-hash of a reviewed preview")
    plan = with_hash(build_serve_plan(req))
    if plan["preview_hash"] != preview_hash:
        old = load_preview(previews_dir(), preview_hash)
        changes = plan_diff(old, plan) if old is not None else None
        summary = (f"{len(changes)} plan field(s) changed since the preview" if changes is not None
                   else "the reviewed preview is not stored here, so the changes cannot be listed")
        raise PreviewStale(f"the plan no longer matches --preview-hash: {summary}",
                           details={"expected": preview_hash, "actual": plan["preview_hash"],
                                    "changes": changes})
    return plan


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM and SIGHUP like Ctrl-C while a launch is in flight, so the child is stopped too."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    saved = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def _launch(plan: dict[str, Any], directory: Path, on_tick: Tick | None) -> dict[str, Any]:
    port = plan["port"]
    log = log_path(directory, port)
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    log.write_bytes(b"")
    child: subprocess.Popen[bytes] | None = None
    written = False
    try:
        child = process.spawn(plan["argv"], plan["env"], log, plan["cwd"])
        receipt = {
            "format_version": FORMAT_VERSION,
            "kind": "serve",
            **process.identity(child.pid),
            "argv": plan["argv"],
            "port": port,
            "host": plan["host"],
            "base_url": plan["base_url"],
            "runtime": plan["runtime"]["name"],
            "model": plan["source"]["path"],
            "repo": plan["source"].get("repo"),
            "log_path": str(log),
            "started_at": _now(),
            "ready_at": None,
            "preview_hash": plan["preview_hash"],
            "plan": plan,
        }
        # The receipt exists from the moment the process does, so even a killed CLI leaves nothing unowned.
        write_receipt(directory, receipt)
        written = True
        wait_ready(child, plan, log, on_tick)
        receipt["ready_at"] = _now()
        write_receipt(directory, receipt)
        return receipt
    except BaseException as exc:
        if child is not None:
            process.stop_group(child.pid, child.pid, grace=5.0, child=child)
        if written:
            receipt_path(directory, port).unlink(missing_ok=True)
        if isinstance(exc, KeyboardInterrupt):
            raise LaunchInterrupted("the launch was interrupted; the server was stopped",
                                    details={"log_path": str(log)}) from None
        raise


def confirm(req: ServeRequest, preview_hash: str | None, directory: Path,
            on_tick: Tick | None = None) -> tuple[dict[str, Any], list[str]]:
    """Launch the reviewed plan under the port lock and return its receipt once the model answers."""
    plan = check_preview(req, preview_hash)
    with port_lock(directory, plan["port"], timeout=0, busy=PortInUse), _terminate_as_interrupt():
        warnings = gates(plan, directory, cleanup=True)
        return _launch(plan, directory, on_tick), warnings
