"""Servers that were started: status cross-checked against live processes, and stop of our own only."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mlx_agent.disk import DiskSpace, disks
from mlx_agent.errors import ReceiptError
from mlx_agent.errors.commands import OwnershipMismatch
from mlx_agent.supervise import process
from mlx_agent.supervise.locks import port_lock
from mlx_agent.supervise.readiness import front_answers, front_health, probe
from mlx_agent.supervise.receipts import has_front, is_unit, read_receipt, receipt_files, receipt_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypedDict

    from mlx_agent.records.plan import AdapterRecord
    from mlx_agent.records.receipt import Receipt

    class AdapterFields(TypedDict):
        """A status entry's adapter: its path and ``bound``, ``verified``, ``changed``, ``missing`` or ``unknown``."""

        adapter_path: str | None
        adapter_status: str | None

    class ModelFields(TypedDict):
        """A status entry's first model, as its receipt lists it."""

        name: str | None
        runtime: str | None
        model: str | None
        repo: str | None


STOP_GRACE_SECONDS = 30.0  # beyond a worker's own stop timeout: a front stopping waits for its workers' saves
STOP_LOCK_SECONDS = 30.0


def adapter_fields(receipt: Receipt, verify: bool) -> AdapterFields:
    """Return the first model's adapter path and status, apart from the base model.

    Plain status reports ``bound`` without reading the files; ``verify`` re-hashes them. A receipt from
    before adapter identity was recorded, whose argv names an adapter, reports ``unknown``.
    """
    adapter: AdapterRecord | None
    if has_front(receipt):
        adapter = receipt["models"][0].get("adapter") if receipt["models"] else None
    else:
        adapter = receipt.get("adapter", (receipt.get("plan") or {}).get("adapter"))
    argv = receipt.get("argv") or []
    if adapter is None:
        if "--adapter-path" in argv:
            return {"adapter_path": argv[argv.index("--adapter-path") + 1], "adapter_status": "unknown"}
        return {"adapter_path": None, "adapter_status": None}
    if not verify:
        return {"adapter_path": adapter["path"], "adapter_status": "bound"}
    from mlx_agent.plan.adapter import verify as verify_adapter

    return {"adapter_path": adapter["path"], "adapter_status": verify_adapter(adapter)}


def model_fields(receipt: Receipt) -> ModelFields:
    """Return the first model's name, runtime, path and repo (a receipt without a front has no name)."""
    if not has_front(receipt):
        return {
            "name": None,
            "runtime": receipt.get("runtime"),
            "model": receipt.get("model"),
            "repo": receipt.get("repo"),
        }
    if not receipt["models"]:
        return {"name": None, "runtime": None, "model": None, "repo": None}
    first = receipt["models"][0]
    return {
        "name": first.get("served_model_name"),
        "runtime": first.get("runtime"),
        "model": first.get("model"),
        "repo": first.get("repo"),
    }


def _entry(path: Path, verify: bool) -> dict[str, Any]:
    port = int(path.stem)
    try:
        receipt = read_receipt(path)
    except ReceiptError as exc:
        return {"port": port, "state": "unreadable", "receipt_path": str(path), "error": exc.to_dict()}
    if is_unit(receipt):
        from mlx_agent.supervise import units

        return {**units.status_entry(receipt, path), **model_fields(receipt), **adapter_fields(receipt, verify)}
    state = process.classify(receipt)
    health = None
    proved = False
    if state == "running":
        host = receipt.get("host", "127.0.0.1")
        answers = probe(host, port, {"path": "/health", "status": 200}, timeout=0.5)
        if has_front(receipt):
            answers = answers or front_health(host, port)  # a front with a wedged worker answers 503
            proved = answers and front_answers(receipt)  # the control token goes only to the front it launched
            health = "ok" if proved else ("not_ours" if answers else "unreachable")
        else:
            health = "ok" if answers else "unreachable"
    front: dict[str, Any] = {}
    if has_front(receipt):
        from mlx_agent.supervise.front import front_status

        front = front_status(receipt) if proved else {"model_state": None, "models": []}
    elif (receipt.get("plan") or {}).get("jit"):
        front = {"jit": True, "model_state": None}  # an older JIT gateway: its control API has changed
    problems = _problems(receipt, path, front) if state == "running" else []
    if health == "ok" and problems:
        health = "degraded"
    return {
        **front,
        "port": port,
        "state": _state(receipt, state),
        "health": health,
        "problems": problems,
        "ring_ports": ring_ports(receipt),
        "disk": [space.to_json() for space in disk_use(receipt, path)],
        "pid": receipt["pid"],
        "pgid": receipt["pgid"],
        "base_url": receipt.get("base_url"),
        **model_fields(receipt),
        "preview_hash": receipt.get("preview_hash"),
        "started_at": receipt.get("started_at"),
        "ready_at": receipt.get("ready_at"),
        "log_path": receipt.get("log_path"),
        "receipt_path": str(path),
        **adapter_fields(receipt, verify),
    }


def ring_ports(receipt: Receipt) -> list[dict[str, Any]]:
    """Return each ring group's link ports, as confirm chose or checked them (the receipt's plan), by model."""
    if not has_front(receipt):
        return []
    from mlx_agent.plan.group import ring_port_count

    return [
        {"model": m["served_model_name"], "ports": list(range(first, first + ring_port_count(group)))}
        for m in receipt["plan"]["models"]
        if (group := m.get("group")) and group["backend"] == "ring" and (first := group.get("ring_port")) is not None
    ]


def disk_use(receipt: Receipt, path: Path) -> list[DiskSpace]:
    """Return the free space of each file system a server writes to: receipts, logs, and its prompt caches."""
    places: list[Path | str] = [path.parent, *(Path(p).parent for p in (receipt.get("log_path"),) if p)]
    if has_front(receipt):
        places += [kept["root"] for m in receipt["plan"]["models"] if (kept := m.get("prompt_cache"))]
    return disks(places)


def _problems(receipt: Receipt, path: Path, front: dict[str, Any]) -> list[dict[str, Any]]:
    """Return what makes a live server less than ok: a disk it writes to under its floor, a failed model."""
    problems: list[dict[str, Any]] = [
        {
            "code": "disk_full",
            "message": f"{space.describe()}: logs, receipts, policy changes and prompt caches may be lost, and "
            "a worker that cannot log breaks off its requests; free some space",
            "path": space.path,
            "free_bytes": space.free_bytes,
            "floor_bytes": space.floor_bytes,
        }
        for space in disk_use(receipt, path)
        if space.low
    ]
    groups = {m["served_model_name"]: m.get("group") for m in receipt["plan"]["models"]} if has_front(receipt) else {}
    for model in front.get("models") or []:
        error = model.get("last_error") or {}
        exited = error.get("code") in ("worker_exited", "generation_died", "worker_wedged")
        # A failed or wedged model, or one whose worker exited (or wedged) and is being started again.
        if model.get("model_state") in ("failed", "wedged") or (exited and model.get("model_state") != "loaded"):
            problem = {
                "code": error.get("code", "model_failed"),
                "message": error.get("message", "the model's last load failed"),
                "model": model.get("name"),
            }
            details = error.get("details") or {}
            group = groups.get(model.get("name"))
            if details.get("ranks") and group:  # which rank ended, on which host
                hosts = group["hosts"]
                problem["ranks"] = [
                    {**r, "host": (hosts[r["rank"]]["ips"] or [hosts[r["rank"]]["ssh"]])[0]}
                    for r in details["ranks"]
                    if r["rank"] < len(hosts)
                ]
            if details.get("log_tail"):
                problem["log_tail"] = details["log_tail"][-5:]
            problems.append(problem)
    return problems


def _state(receipt: Receipt, state: str) -> str:
    """Name a live server still starting: ``starting`` while its confirm waits, ``orphaned`` once it is gone."""
    if state != "running" or receipt.get("ready_at") is not None:
        return state
    pid, born = receipt.get("confirm_pid"), receipt.get("confirm_create_time")
    ticks = receipt.get("confirm_start_ticks")
    if isinstance(pid, int) and isinstance(born, float) and not process.alive(pid, born, ticks):
        return "orphaned"  # the confirm was killed while it waited: nothing will mark it ready
    return "starting"


def status(directory: Path, port: int | None = None, *, verify: bool = False) -> list[dict[str, Any]]:
    """Return one entry per receipt, cross-checked against the live process and probed if running."""
    paths = [receipt_path(directory, port)] if port is not None else receipt_files(directory)
    return [_entry(p, verify) for p in paths if p.exists()]


def stop(
    directory: Path, port: int, *, uninstall: bool = False, grace: float = STOP_GRACE_SECONDS
) -> tuple[dict[str, Any], list[str]]:
    """Stop the server of ``port`` if, and only if, the live process is the receipt's; remove the receipt.

    A unit-owned server is not ours to signal: the stop command is returned for the user, and with
    ``uninstall`` the unit file and receipt are removed.
    """
    path = receipt_path(directory, port)
    seen = path.exists()  # a receipt gone while we waited for the lock was stopped by a concurrent stop
    with port_lock(directory, port, timeout=STOP_LOCK_SECONDS):
        if seen and not os.path.lexists(path):
            return {"port": port, "pid": None, "receipt_path": str(path), "result": "already_stopped"}, [
                "another stop ended this server while this one waited for the port's lock"
            ]
        receipt = read_receipt(path)
        if is_unit(receipt):
            from mlx_agent.supervise import units

            return units.stop(receipt, path, uninstall)
        return _stop_process(receipt, path, grace), []


def _stop_process(receipt: Receipt, path: Path, grace: float) -> dict[str, Any]:
    """Stop a process of ours after matching it against its receipt; remove the receipt."""
    port = int(receipt["port"])
    state = process.classify(receipt)
    result = {"port": port, "pid": receipt["pid"], "receipt_path": str(path), "log_path": receipt.get("log_path")}
    if state == "foreign":
        raise OwnershipMismatch(
            f"pid {receipt['pid']} is no longer the server this receipt started; nothing was signalled",
            details={**result, "receipt_kept": True},
        )
    if state == "exited":
        _forget(receipt, path)
        return {**result, "result": "already_stopped"}
    try:
        live_pgid = os.getpgid(receipt["pid"])
    except ProcessLookupError:
        _forget(receipt, path)
        return {**result, "result": "already_stopped"}
    if live_pgid == os.getpgrp():
        raise OwnershipMismatch(
            f"pid {receipt['pid']} is in this command's own process group {live_pgid}: a server of ours never is",
            details={**result, "receipt_kept": True},
        )
    if live_pgid != receipt["pgid"]:
        raise OwnershipMismatch(
            f"pid {receipt['pid']} is in process group {live_pgid}, not the recorded {receipt['pgid']}",
            details={**result, "receipt_kept": True},
        )
    started = time.monotonic()
    how = process.stop_group(receipt["pid"], receipt["pgid"], grace=grace)
    _forget(receipt, path)
    return {**result, "result": "stopped", "how": how, "seconds": round(time.monotonic() - started, 3)}


def _forget(receipt: Receipt, path: Path) -> None:
    """Remove a stopped server's receipt, and its front's private files."""
    path.unlink(missing_ok=True)
    if has_front(receipt):
        from mlx_agent.supervise.front import remove_front_files

        remove_front_files(receipt["plan"])
