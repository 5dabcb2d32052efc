"""The supervisor's side of a front: its private files at confirm, and its control endpoints after.

The control token is random, so it is written here (0600, beside the receipt) and never enters a plan.
Every control call first matches the live front against its receipt and the caller's --expected-pid.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from mlx_agent.errors import InvalidArguments, PolicyRejected, StateWriteFailed, UnloadBlocked
from mlx_agent.errors.commands import (
    ExpectedPidMismatch,
    GatewayUnreachable,
    NoFront,
    OwnershipMismatch,
    ReceiptNotFound,
)
from mlx_agent.files import NOFOLLOW, check_private_dir, open_private, private_dir, write_json_atomic
from mlx_agent.plan.front import front_config
from mlx_agent.supervise import process
from mlx_agent.supervise.locks import port_lock
from mlx_agent.supervise.readiness import front_answers
from mlx_agent.supervise.receipts import has_front, read_receipt, receipt_path
from mlx_agent.wire import CONTROL_PREFIX

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.policy import Policy
    from mlx_agent.records.plan import ModelPlan, ServePlan
    from mlx_agent.records.receipt import ServeReceipt

CONTROL_LOCK_SECONDS = 30.0
# What `serve status` shows of the front's state, per model and for the whole front.
STATUS_KEYS = (
    "model_state",
    "worker",
    "policy",
    "memory_check",
    "load_blocked_reason",
    "open_requests",
    "open_streams",
    "loads",
    "evictions",
    "worker_exits",
    "queue",
    "stall",
    "last_used",
    "weight_bytes",
    "memory_estimate_bytes",
    "last_error",
    "idle_since",
    "load_progress",  # what the worker reports and the front samples (gateway/models/progress.py)
    "prefill",
    "worker_rss_bytes",
    "window",
    "caches",  # an mlx-vlm chat model's prefix and vision caches (front state 2.1)
    "endpoints",  # the endpoints that answer the model (front state 2.2)
)


def front_executable(plan: ServePlan) -> str:
    """Return the file the front is started by: the one the plan's argv[0] leads to, checked by content.

    Its sha256 must be the reviewed ``interpreter_sha256`` (a link swapped for a script, or pointed at another
    interpreter, leads to other content), else ``runtime_changed``; argv[0] itself is never followed again,
    so a link swapped after this check is not run either. (A macOS framework stub, or a wrapper script that
    was reviewed, is started as reviewed.)
    """
    from mlx_agent.files import changed_files
    from mlx_agent.spawn import interpreter_changed

    argv0 = plan["argv"][0]
    target = os.path.realpath(argv0)
    path = Path(target)
    try:
        size = path.stat().st_size
    except OSError:
        size = -1
    changed = changed_files([(path, plan["front"]["interpreter_sha256"], size)])
    if changed:
        raise interpreter_changed([{**c, "via": argv0} for c in changed])
    return target


def check_front_paths(plan: ServePlan) -> None:
    """Refuse a front's socket directory that is a link, another user's, or open to others (``state_dir_unsafe``).

    The front creates it and binds its workers' sockets inside; a link planted there beforehand would have it
    chmod and bind in whatever directory the link names. The other front files are replaced, never followed.
    """
    if plan["front"]["socket_dir"]:
        check_private_dir(Path(plan["front"]["socket_dir"]))


def write_front_files(plan: ServePlan) -> None:
    """Write a fresh control token and the reviewed config; drop a policy left by an earlier front.

    On any failure (a full disk) every file written so far is removed again, the token first of all.
    """
    try:
        _write_front_files(plan)
    except BaseException:
        remove_front_files(plan)
        raise


def _write_front_files(plan: ServePlan) -> None:
    front = plan["front"]
    token_path = Path(front["token_path"])
    private_dir(token_path.parent)
    token_path.unlink(missing_ok=True)
    try:
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
    except OSError as exc:
        raise StateWriteFailed(
            f"cannot write {token_path}: {exc.strerror or exc}", details={"path": str(token_path), "errno": exc.errno}
        ) from exc
    Path(front["policy_path"]).unlink(missing_ok=True)  # the reviewed policy, not a previous front's
    for model in plan["models"]:
        if model["group"] is not None:  # the reviewed host list, which the group's launcher reads
            write_json_atomic(Path(model["group"]["hostfile_path"]), model["group"]["hosts"])
    write_json_atomic(Path(front["config_path"]), front_config(plan))


def remove_front_files(plan: ServePlan) -> None:
    """Remove a stopped front's private files (config, token, persisted policy, socket directory); logs stay."""
    import shutil

    front = plan["front"]
    groups = [group["hostfile_path"] for m in plan["models"] if (group := m.get("group")) is not None]
    for raw in (front["config_path"], front["token_path"], front["policy_path"], *groups):
        Path(raw).unlink(missing_ok=True)
    if front["socket_dir"]:
        shutil.rmtree(front["socket_dir"], ignore_errors=True)


def _call(
    receipt: ServeReceipt, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 5.0
) -> tuple[int, dict[str, Any]]:
    import http.client

    token_path = receipt["plan"]["front"]["token_path"]
    try:
        with os.fdopen(open_private(Path(token_path), os.O_RDONLY), "rb") as fh:  # never a planted link
            token = fh.read().decode("utf-8", "replace").strip()
    except OSError as exc:
        raise GatewayUnreachable(f"cannot read the control token: {exc}", details={"path": token_path}) from exc
    conn = http.client.HTTPConnection(receipt["host"], int(receipt["port"]), timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn.request(method, CONTROL_PREFIX + path, body=None if body is None else json.dumps(body), headers=headers)
        resp = conn.getresponse()
        data = json.loads(resp.read() or b"{}")
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise GatewayUnreachable(
            f"the front on port {receipt['port']} did not answer: {exc}", details={"port": receipt["port"]}
        ) from exc
    finally:
        conn.close()
    return resp.status, data if isinstance(data, dict) else {}


def front_status(receipt: ServeReceipt) -> dict[str, Any]:
    """Return the live front's state for ``serve status``, or what went wrong asking for it."""
    try:
        code, state = _call(receipt, "GET", "status", timeout=1.0)
    except GatewayUnreachable as exc:
        return {"model_state": None, "gateway_error": exc.message, "models": []}
    if code != 200:
        return {"model_state": None, "gateway_error": f"status answered HTTP {code}", "models": []}
    models = [m for m in state.get("models") or [] if isinstance(m, dict)]
    first = models[0] if models else {}
    kept = {m["served_model_name"]: m for m in receipt["plan"]["models"]}
    return {
        "mode": state.get("mode"),
        "max_loaded": state.get("max_loaded"),
        **{k: first.get(k) for k in STATUS_KEYS},
        "models": [
            {
                "name": m.get("name"),
                "aliases": m.get("aliases"),
                # What the model serves: the front's word, else the plan's (a front before state 2.2).
                "kind": m.get("kind") or _planned_kind(kept.get(str(m.get("name")))),
                **{k: m.get(k) for k in STATUS_KEYS},
                "prompt_cache": prompt_cache_use(kept.get(str(m.get("name")))),
            }
            for m in models
        ],
    }


def _planned_kind(model: ModelPlan | None) -> str | None:
    """Return the kind the plan gave a model's worker ("text" for a plan from before kinds), if it is planned."""
    return None if model is None else model["worker"].get("kind") or "text"


def prompt_cache_use(model: ModelPlan | None) -> dict[str, Any] | None:
    """Return what a model's kept prompt cache holds on disk now: entries, bytes, and the home's limit."""
    if model is None or not model.get("prompt_cache"):
        return None  # none kept, or a plan from before prompt caches were kept
    from mlx_agent.kept_cache import cache_dir, effective_limit, kept_cache_health, last_save
    from mlx_agent.plan.front import model_config

    config = model_config(model)
    directory = cache_dir(config)
    assert directory is not None and config["prompt_cache"] is not None
    sizes = [p.stat().st_size for p in directory.glob("*.safetensors") if not p.name.startswith(".")]
    return {
        "dir": str(directory),
        "entries": len(sizes),
        "bytes": sum(sizes),
        "disk_gb": config["prompt_cache"]["disk_gb"],
        **effective_limit(directory.parent, config["prompt_cache"]["disk_gb"]),  # held to half the usable space
        **kept_cache_health(directory),  # quarantined entries, and why a directory is refused
        "last_save": last_save(directory),  # what the last save did: saved, skipped at the floor, failed
    }


def _live_front(directory: Path, port: int, expected_pid: int) -> ServeReceipt:
    path = receipt_path(directory, port)
    if not path.exists():
        raise ReceiptNotFound(f"no receipt for port {port}", details={"port": port, "path": str(path)})
    receipt = read_receipt(path)
    if not has_front(receipt) or "pid" not in receipt:
        raise NoFront(f"port {port} has no front mlx-agent supervises", details={"port": port})
    if receipt["pid"] != expected_pid:
        raise ExpectedPidMismatch(
            f"the front on port {port} has pid {receipt['pid']}, not {expected_pid}",
            details={"port": port, "pid": receipt["pid"], "expected_pid": expected_pid},
        )
    state = process.classify(receipt)
    if state != "running":
        raise OwnershipMismatch(
            f"pid {expected_pid} is not the running front of port {port} ({state})",
            details={"port": port, "state": state},
        )
    if not front_answers(receipt):  # the control token is sent only to the front this receipt launched
        raise GatewayUnreachable(
            f"port {port} does not answer as the front this receipt launched (no proof of its control token)",
            details={"port": port},
        )
    return receipt


def _unknown_model(port: int, model: str | None, code: int, data: dict[str, Any]) -> None:
    """Refuse a --model the front does not serve (it answered 404 naming the served models)."""
    if code == 404 and model is not None:
        message = data.get("error", {}).get("message", "")
        raise InvalidArguments(f"--model {model}: {message}", details={"port": port, "model": model})


def unload(directory: Path, port: int, expected_pid: int, model: str | None = None) -> dict[str, Any]:
    """Release the front's loaded workers (or one model's), keeping the front up; refused while busy."""
    with port_lock(directory, port, timeout=CONTROL_LOCK_SECONDS):
        receipt = _live_front(directory, port, expected_pid)
        body = {} if model is None else {"model": model}
        code, data = _call(receipt, "POST", "unload", body, timeout=20.0)  # it waits for the workers to stop
    _unknown_model(port, model, code, data)
    if code == 409:
        error = data.get("error", {})
        raise UnloadBlocked(
            f"{error.get('model') or 'a model'} on port {port} has open requests or streams",
            details={k: error.get(k) for k in ("model", "open_requests", "open_streams", "loading")},
        )
    if code != 200:
        raise GatewayUnreachable(f"unload answered HTTP {code}", details={"port": port, "answer": data})
    return {"port": port, "pid": expected_pid, **data}


def replace_policy(
    directory: Path, port: int, expected_pid: int, policy: Policy, model: str | None = None
) -> dict[str, Any]:
    """Replace the whole policy of a live front (its idle part for one model or all); the front persists it."""
    with port_lock(directory, port, timeout=CONTROL_LOCK_SECONDS):
        receipt = _live_front(directory, port, expected_pid)
        body = policy.to_json() if model is None else {**policy.to_json(), "model": model}
        code, data = _call(receipt, "PUT", "policy", body)
    _unknown_model(port, model, code, data)
    if code == 400:
        raise PolicyRejected(
            f"the front refused the policy: {data.get('error', {}).get('message', data)}", details={"answer": data}
        )
    if code != 200:
        raise GatewayUnreachable(f"policy answered HTTP {code}", details={"port": port, "answer": data})
    return {"port": port, "pid": expected_pid, **data}
