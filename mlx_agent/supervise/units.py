"""Installing, inspecting and removing start-at-login units that a receipt owns.

mlx-agent writes the unit file and its receipt; launchd or systemd starts the server when the user runs
the printed commands. A unit file is overwritten or removed only when a receipt owns it and it still
has the content that receipt recorded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from mlx_agent.errors.commands import UnitModified, UnitNotOwned
from mlx_agent.files import private_dir, replace_atomically
from mlx_agent.supervise.readiness import probe
from mlx_agent.supervise.receipts import has_front, plan_receipt, write_receipt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.records.plan import ServePlan
    from mlx_agent.records.receipt import Receipt, ServeReceipt


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_unit_path(plan: ServePlan) -> None:
    """Refuse a unit path where a file exists that no receipt of this port owns."""
    path = Path(plan["unit"]["path"])
    if path.exists() or path.is_symlink():
        raise UnitNotOwned(
            f"{path} exists and no receipt of mlx-agent owns it; it is left as it is", details={"path": str(path)}
        )


def _write_unit(path: Path, content: str) -> None:
    """Write the unit atomically, readable by the session manager (0644)."""
    private_dir(path.parent)
    replace_atomically(path, content.encode("utf-8"), 0o644)


def install(plan: ServePlan, directory: Path, now: str) -> ServeReceipt:
    """Write the plan's unit file and the receipt that owns it; return the receipt. Starts nothing."""
    unit = plan["unit"]
    check_unit_path(plan)
    private_dir(Path(unit["log_path"]).parent)
    receipt: ServeReceipt = {
        **plan_receipt(plan, unit["kind"], unit["log_path"]),
        "installed_at": now,
        "unit": {
            "kind": unit["kind"],
            "name": unit["name"],
            "path": unit["path"],
            "sha256": _sha256(unit["content"]),
            "commands": unit["commands"],
        },
    }
    # The receipt first: a unit file never exists without the receipt that owns it.
    write_receipt(directory, receipt)
    try:
        _write_unit(Path(unit["path"]), unit["content"])
    except BaseException:
        (directory / f"{plan['port']}.json").unlink(missing_ok=True)
        raise
    return receipt


def unit_state(receipt: Receipt) -> str:
    """Return ``installed``, ``unit_missing`` or ``unit_modified`` for a unit receipt."""
    path = Path(receipt["unit"]["path"])
    try:
        content = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "unit_missing"
    return "installed" if _sha256(content) == receipt["unit"]["sha256"] else "unit_modified"


def status_entry(receipt: Receipt, path: Path) -> dict[str, Any]:
    """Return a unit-owned server's status: its file's state and whether something answers on its port."""
    port = int(receipt["port"])
    answers = probe(receipt.get("host", "127.0.0.1"), port, {"path": "/health", "status": 200}, timeout=0.5)
    return {
        "port": port,
        "state": unit_state(receipt),
        "supervisor": receipt["supervisor"],
        "health": "ok" if answers else "unreachable",
        "unit_path": receipt["unit"]["path"],
        "commands": receipt["unit"]["commands"],
        "base_url": receipt.get("base_url"),
        "preview_hash": receipt.get("preview_hash"),
        "started_at": receipt.get("installed_at"),
        "log_path": receipt.get("log_path"),
        "receipt_path": str(path),
    }


def stop(receipt: Receipt, path: Path, uninstall: bool) -> tuple[dict[str, Any], list[str]]:
    """Return the commands that stop a unit's server; with ``uninstall`` remove its file and receipt too."""
    unit = receipt["unit"]
    result = {
        "port": receipt["port"],
        "supervisor": receipt["supervisor"],
        "unit_path": unit["path"],
        "commands": unit["commands"]["stop"],
        "receipt_path": str(path),
    }
    if not uninstall:
        return {**result, "result": "stop_command_printed", "uninstalled": False}, []
    state = unit_state(receipt)
    if state == "unit_modified":
        raise UnitModified(
            f"{unit['path']} no longer has the content mlx-agent wrote; nothing was removed", details=result
        )
    warnings = []
    if probe(receipt.get("host", "127.0.0.1"), int(receipt["port"]), {"path": "/health", "status": 200}, timeout=0.5):
        warnings.append(f"a server still answers on port {receipt['port']}; run the stop command to end it")
    Path(unit["path"]).unlink(missing_ok=True)
    if has_front(receipt):
        from mlx_agent.supervise.front import remove_front_files

        remove_front_files(receipt["plan"])  # the unit's front config and token go with it
    path.unlink(missing_ok=True)
    return {**result, "result": "uninstalled", "uninstalled": True}, warnings
