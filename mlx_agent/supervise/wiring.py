"""Wiring's effects: config files written atomically, their original bytes kept, wired records written and read.

A wired record (``$MLX_AGENT_HOME/wired/<agent>-<scope>-<hash>.json``) names the server a wiring points at
(``base_url``, ``runtime``, ``model``: what ``plan/wired.py`` reads for ``port_claimed``) and, per file, the
sha256 before and after and the keys added, so ``unwire`` can give the original bytes back or take out only
its own keys. The original bytes are kept beside it, private, under ``wired/originals/``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mlx_agent.canonical import with_hash
from mlx_agent.errors import PreviewStale
from mlx_agent.errors.commands import (
    AlreadyWired,
    NoServer,
    NotWired,
    PreviewHashRequired,
    ReceiptCorrupt,
    WiredServerMismatch,
)
from mlx_agent.files import (
    open_private,
    private_dir,
    replace_atomically,
    sha256_file,
    utc_now,
    write_json_atomic,
)
from mlx_agent.home import previews_dir
from mlx_agent.plan.wiring import (
    ConfigFile,
    Edit,
    record_stem,
    sha256_bytes,
    unwire_file,
    wire_plan,
    write_target,
)
from mlx_agent.supervise.previews import load_preview, save_preview

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from mlx_agent.plan.agent_settings import ServedFacts


def _record_path(wired: Path, agent: str, scope: str, files: Sequence[ConfigFile]) -> Path:
    return wired / f"{record_stem(agent, scope, files)}.json"


def read_record(path: Path) -> dict[str, Any]:
    """Return a wired record of ours, refusing one that is not (``receipt_corrupt``)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReceiptCorrupt(f"wired record {path} is unreadable: {exc}", details={"path": str(path)}) from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list) or "agent" not in data:
        raise ReceiptCorrupt(f"wired record {path} is not a wiring of mlx-agent's", details={"path": str(path)})
    return data


def wiring_records(wired: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Return each wired record this tool wrote (other tools' wired configs are left out)."""
    found: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(wired.glob("*.json")) if wired.is_dir() else []:
        try:
            found.append((path, read_record(path)))
        except ReceiptCorrupt:
            continue
    return found


def reviewed(build: Callable[[], tuple[dict[str, Any], Any]], preview_hash: str | None) -> tuple[dict[str, Any], Any]:
    """Rebuild a plan and return it if its hash is the reviewed one; otherwise name each file that changed."""
    if not preview_hash:
        raise PreviewHashRequired("--confirm needs the --preview-hash of a reviewed preview")
    plan, data = build()
    plan = with_hash(plan)
    if plan["preview_hash"] == preview_hash:
        return plan, data
    old = load_preview(previews_dir(), preview_hash)
    before = {f["path"]: f.get("sha256_before", f.get("sha256_current")) for f in (old or {}).get("files", [])}
    changed = [
        f["path"]
        for f in plan["files"]
        if f["path"] not in before or before[f["path"]] != f.get("sha256_before", f.get("sha256_current"))
    ]
    if (
        not changed
        and old is not None
        and old.get("server", {}).get("identity") != plan.get("server", {}).get("identity")
    ):
        server = plan["server"]
        raise WiredServerMismatch(
            f"the server on port {server['port']} is not the one previewed (it was restarted or replaced)",
            details={"port": server["port"], "previewed": old["server"].get("identity"), "now": server["identity"]},
        )
    if changed:
        summary = f"{', '.join(changed)} changed since the preview"
    elif old is not None:
        summary = "the server or the settings changed since the preview"
    else:
        summary = "the reviewed preview is not stored here"
    raise PreviewStale(
        f"the plan no longer matches --preview-hash: {summary}",
        details={"expected": preview_hash, "actual": plan["preview_hash"], "files": changed},
    )


def preview(plan: dict[str, Any]) -> dict[str, Any]:
    """Hash a plan and keep it, so a stale confirm can name what changed since."""
    hashed = with_hash(plan)
    save_preview(private_dir(previews_dir()), hashed)
    return hashed


def owner_of(path: Path) -> tuple[int, int]:
    """Return the (uid, gid) a config file written at ``path`` keeps: the file's, else its nearest directory's.

    Run as root on another user's file (``sudo mlx-agent wire`` with their HOME), the file stays theirs; a file
    or directory the wire makes belongs to whoever owns the directory it is made in.
    """
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    st = os.stat(probe)
    return st.st_uid, st.st_gid


def write_config(target: Path, data: bytes, mode: int | None) -> None:
    """Replace ``target`` with ``data``: readers see the old file or the new one (same mode and owner; 0600 if new)."""
    owner = owner_of(target)
    missing = []
    probe = target.parent
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        os.mkdir(directory, 0o700)
        if os.geteuid() == 0:
            os.chown(directory, *owner, follow_symlinks=False)
    replace_atomically(target, data, 0o600 if mode is None else mode, owner)


def _keep_original(path: Path, data: bytes) -> None:
    private_dir(path.parent)
    fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def plan_wire(
    agent: str, scope: str, server: Mapping[str, Any], edits: Sequence[tuple[ConfigFile, Sequence[Edit]]], wired: Path
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Plan a wiring, refusing one over a wiring already in place (``already_wired``)."""
    record = _record_path(wired, agent, scope, [cf for cf, _ in edits])
    if record.exists():
        raise AlreadyWired(
            f"{agent} ({scope}) is already wired by {record}", details={"record": str(record), "agent": agent}
        )
    return wire_plan(agent, scope, server, edits, wired)


def confirm_wire(plan: dict[str, Any], new_bytes: Mapping[str, bytes]) -> dict[str, Any]:
    """Write a reviewed wiring: keep each original, replace each file atomically, then write the record."""
    for entry in plan["files"]:
        target = Path(entry["target"])
        current = target.read_bytes() if target.exists() else None
        if sha256_bytes(current) != entry["sha256_before"]:  # changed between the rebuild and now
            raise PreviewStale(f"{entry['path']} changed while it was being wired", details={"files": [entry["path"]]})
        if entry["backup"] is not None and current is not None:
            _keep_original(Path(entry["backup"]), current)
        write_config(target, new_bytes[entry["path"]], entry["mode"])
    server = plan["server"]
    record = {
        "format_version": plan["format_version"],
        "agent": plan["agent"],
        "scope": plan["scope"],
        "base_url": server["base_url"],
        "port": server["port"],
        "runtime": server.get("runtime"),
        "model": server.get("model"),
        "server": server,
        "files": [{k: v for k, v in f.items() if k != "diff"} for f in plan["files"]],
        "preview_hash": plan["preview_hash"],
        "wired_at": utc_now(),
    }
    write_json_atomic(Path(plan["record"]), record)
    return record


def plan_unwire(wired: Path, agent: str, scope: str, files: Sequence[ConfigFile]) -> tuple[dict[str, Any], Any]:
    """Plan undoing a wiring: each file's bytes back (unchanged since) or only its keys out (edited since)."""
    path = _record_path(wired, agent, scope, files)
    if not path.exists():
        raise NotWired(f"{agent} ({scope}) is not wired here", details={"record": str(path), "agent": agent})
    record = read_record(path)
    entries: list[dict[str, Any]] = []
    new_bytes: dict[str, bytes | None] = {}
    for entry in record["files"]:
        original = None
        if entry.get("backup"):
            backup = Path(entry["backup"])
            if not backup.is_file() or sha256_file(backup) != entry["sha256_before"]:
                raise ReceiptCorrupt(
                    f"the original of {entry['path']} kept at {backup} is missing or changed",
                    details={"path": entry["path"], "backup": str(backup)},
                )
            original = backup.read_bytes()
        planned, new = unwire_file(entry, original)
        entries.append(planned)
        new_bytes[entry["path"]] = new
    plan = {
        "format_version": record["format_version"],
        "operation": "unwire",
        "agent": agent,
        "scope": scope,
        "record": str(path),
        "files": entries,
    }
    return plan, new_bytes


def confirm_unwire(plan: dict[str, Any], new_bytes: Mapping[str, bytes | None]) -> dict[str, Any]:
    """Write a reviewed unwire, then remove the record and the originals it kept."""
    record = read_record(Path(plan["record"]))
    kinds = {f["path"]: f for f in record["files"]}
    for entry in plan["files"]:
        if entry["action"] == "absent":
            continue
        cf = ConfigFile(Path(entry["path"]), kinds[entry["path"]]["kind"], Path(kinds[entry["path"]]["root"]))
        target = write_target(cf)
        data = new_bytes[entry["path"]]
        if data is None:
            target.unlink()
            continue
        kept_mode = kinds[entry["path"]].get("mode")  # the mode the file had before the wire
        mode = os.stat(target).st_mode & 0o7777 if kept_mode is None else kept_mode
        write_config(target, data, mode)
    for entry in record["files"]:
        if entry.get("backup"):
            Path(entry["backup"]).unlink(missing_ok=True)
    Path(plan["record"]).unlink()
    return {"record": plan["record"], "files": plan["files"]}


def served_server(directory: Path, port: int, model: str | None) -> tuple[ServedFacts, dict[str, Any]]:
    """Return the live server's facts (``no_server`` when none of ours answers) and what a record names of it.

    The identity is the receipt's process (pid, create time, process group): a restarted server is another.
    """
    from mlx_agent.supervise.agent_run import check_model, served_facts
    from mlx_agent.supervise.receipts import read_receipt, receipt_path

    facts = served_facts(directory, port)
    check_model(facts, model)
    path = receipt_path(directory, port)
    receipt: Any = read_receipt(path)
    chosen = model if model in facts.models else facts.models[0]
    runtime = next((m["runtime"]["name"] for m in receipt["plan"]["models"] if m["served_model_name"] == chosen), None)
    server = {
        "port": port,
        "base_url": facts.base_url,
        "runtime": runtime,
        "model": chosen,
        "served": list(facts.models),
        "aliases": list(facts.aliases),
        "receipt": str(path),
        "identity": {k: receipt.get(k) for k in ("pid", "pgid", "create_time")},
    }
    return facts, server


def wiring_status(wired: Path, directory: Path) -> list[dict[str, Any]]:
    """Return each wiring: its files' drift and whether its server is up and still the process wired."""
    from mlx_agent.plan.wiring import file_drift

    out: list[dict[str, Any]] = []
    for path, record in wiring_records(wired):
        server = record.get("server") or {}
        try:
            _, live = served_server(directory, int(record["port"]), None)
        except NoServer as exc:
            state, now = "down", {"error": exc.code, "message": exc.message}
        else:
            state = "up" if live["identity"] == server.get("identity") else "replaced"
            now = {"identity": live["identity"]}
        files = [file_drift(entry) for entry in record["files"]]
        out.append(
            {
                "record": str(path),
                "agent": record["agent"],
                "scope": record["scope"],
                "port": record["port"],
                "base_url": record["base_url"],
                "model": record.get("model"),
                "wired_at": record.get("wired_at"),
                "server": {"state": state, "wired": server.get("identity"), **now},
                "files": files,
                "drifted": any(f["state"] != "unchanged" for f in files),
            }
        )
    return out


def wiring_lock(wired: Path, agent: str, scope: str, files: Sequence[ConfigFile]) -> Any:
    """Return the lock that serialises confirms of one wiring (two at once would both keep an "original").

    Its file (``wired/locks/<stem>.lock``) is removed when the confirm ends, so none stays after an ``unwire``;
    ``wire status`` reads only the records, so one left by a killed command changes nothing.
    """
    from mlx_agent.errors.commands import LockTimeout
    from mlx_agent.supervise.locks import file_lock

    stem = record_stem(agent, scope, files)
    busy = LockTimeout(f"another mlx-agent command is wiring {agent} ({scope})", details={"agent": agent})
    return file_lock(wired / "locks" / f"{stem}.lock", timeout=10, busy=busy, remove=True)
