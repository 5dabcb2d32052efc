"""The supervisor's side of a JIT gateway: its private files at confirm, and its control endpoints after.

The control token is random, so it is written here (0600, beside the receipt) and never enters a plan.
Every control call first matches the live gateway against its receipt and the caller's --expected-pid.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from mlx_agent.errors import (
    ExpectedPidMismatch,
    GatewayUnreachable,
    NotJit,
    OwnershipMismatch,
    PolicyRejected,
    ReceiptNotFound,
    UnloadBlocked,
)
from mlx_agent.files import write_json_atomic
from mlx_agent.supervise import process
from mlx_agent.supervise.locks import port_lock
from mlx_agent.supervise.receipts import read_receipt, receipt_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CONTROL_PREFIX = "/mlx-agent"
CONTROL_LOCK_SECONDS = 30.0


def write_gateway_files(plan: dict[str, Any]) -> None:
    """Write a fresh control token and the reviewed config; drop a policy left by an earlier gateway."""
    config = plan["jit"]["config"]
    token_path = Path(config["control_token_path"])
    token_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token_path.unlink(missing_ok=True)
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    Path(config["policy_path"]).unlink(missing_ok=True)  # the reviewed policy, not a previous gateway's
    write_json_atomic(Path(plan["jit"]["config_path"]), config)


def _call(receipt: dict[str, Any], method: str, path: str, body: dict[str, Any] | None = None,
          timeout: float = 5.0) -> tuple[int, dict[str, Any]]:
    import http.client

    config = receipt["plan"]["jit"]["config"]
    try:
        token = Path(config["control_token_path"]).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise GatewayUnreachable(f"cannot read the control token: {exc}",
                                 details={"path": config["control_token_path"]}) from exc
    conn = http.client.HTTPConnection(receipt["host"], int(receipt["port"]), timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn.request(method, CONTROL_PREFIX + path, body=None if body is None else json.dumps(body), headers=headers)
        resp = conn.getresponse()
        data = json.loads(resp.read() or b"{}")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise GatewayUnreachable(f"the gateway on port {receipt['port']} did not answer: {exc}",
                                 details={"port": receipt["port"]}) from exc
    finally:
        conn.close()
    return resp.status, data if isinstance(data, dict) else {}


def gateway_status(receipt: dict[str, Any]) -> dict[str, Any]:
    """Return the live gateway's state for ``serve status``, or what went wrong asking for it."""
    try:
        code, state = _call(receipt, "GET", "/status", timeout=1.0)
    except GatewayUnreachable as exc:
        return {"model_state": None, "gateway_error": exc.message}
    if code != 200:
        return {"model_state": None, "gateway_error": f"status answered HTTP {code}"}
    keys = ("model_state", "worker", "policy", "memory_check", "load_blocked_reason", "open_requests",
            "open_streams", "loads", "last_error", "idle_since")
    return {k: state.get(k) for k in keys}


def _live_gateway(directory: Path, port: int, expected_pid: int) -> tuple[dict[str, Any], Path]:
    path = receipt_path(directory, port)
    if not path.exists():
        raise ReceiptNotFound(f"no receipt for port {port}", details={"port": port, "path": str(path)})
    receipt = read_receipt(path)
    if not (receipt.get("plan") or {}).get("jit"):
        raise NotJit(f"port {port} does not run a JIT gateway", details={"port": port})
    if receipt.get("pid") != expected_pid:
        raise ExpectedPidMismatch(f"the gateway on port {port} has pid {receipt.get('pid')}, not {expected_pid}",
                                  details={"port": port, "pid": receipt.get("pid"), "expected_pid": expected_pid})
    state = process.classify(receipt)
    if state != "running":
        raise OwnershipMismatch(f"pid {expected_pid} is not the running gateway of port {port} ({state})",
                                details={"port": port, "state": state})
    return receipt, path


def unload(directory: Path, port: int, expected_pid: int) -> dict[str, Any]:
    """Release the gateway's worker, keeping the gateway up; refused while requests or streams are open."""
    with port_lock(directory, port, timeout=CONTROL_LOCK_SECONDS):
        receipt, _ = _live_gateway(directory, port, expected_pid)
        code, data = _call(receipt, "POST", "/unload", timeout=20.0)  # it waits for the worker to stop
    if code == 409:
        error = data.get("error", {})
        raise UnloadBlocked(f"the gateway on port {port} has open requests or streams",
                            details={k: error.get(k) for k in ("open_requests", "open_streams", "loading")})
    if code != 200:
        raise GatewayUnreachable(f"unload answered HTTP {code}", details={"port": port, "answer": data})
    return {"port": port, "pid": expected_pid, **data}


def replace_policy(directory: Path, port: int, expected_pid: int, policy: dict[str, Any]) -> dict[str, Any]:
    """Replace the whole policy of a live gateway; the gateway persists it atomically."""
    with port_lock(directory, port, timeout=CONTROL_LOCK_SECONDS):
        receipt, _ = _live_gateway(directory, port, expected_pid)
        code, data = _call(receipt, "PUT", "/policy", policy)
    if code == 400:
        raise PolicyRejected(f"the gateway refused the policy: {data.get('error', {}).get('message', data)}",
                             details={"answer": data})
    if code != 200:
        raise GatewayUnreachable(f"policy answered HTTP {code}", details={"port": port, "answer": data})
    return {"port": port, "pid": expected_pid, **data}
