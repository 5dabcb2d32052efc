"""The JIT part of a serve plan: the gateway that keeps the port up and loads one worker on request.

Everything the gateway's config file will hold is in the plan, so the reviewed hash covers it; confirm
only adds the random control token (kept in its own 0600 file, never in a plan).
"""

from __future__ import annotations

from pathlib import Path

from mlx_agent.errors import InvalidArguments
from mlx_agent.plan.identity import read_safetensors_header

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

GATEWAY_MODULE = "mlx_agent.gateway"
MAX_BODY_BYTES = 16 * 1024 * 1024
GATEWAY_READINESS = {"path": "/health", "status": 200, "json": {"status": "ok"}}


def _tensor_bytes(path: Path) -> int:
    _, header = read_safetensors_header(path)
    return sum(int(t["data_offsets"][1]) - int(t["data_offsets"][0]) for k, t in header.items() if k != "__metadata__")


def weight_bytes(source: dict[str, Any], adapter: dict[str, Any] | None) -> int | None:
    """Return the tensor bytes a load brings into memory, read from safetensors headers (None if unknown)."""
    weights = [Path(source["path"]) / f["name"] for f in source["files"] if f["name"].endswith(".safetensors")]
    if not weights:
        return None
    total = sum(_tensor_bytes(path) for path in weights)
    if adapter is not None:
        total += _tensor_bytes(Path(adapter["path"]) / "adapters.safetensors")
    return total


def policy(idle_timeout: float | None, keep_loaded: bool, min_headroom_gb: float | None) -> dict[str, Any]:
    """Return a gateway policy; without flags the worker stays loaded until unloaded by hand."""
    if idle_timeout is not None and idle_timeout < 0:
        raise InvalidArguments("--idle-timeout must be 0 (disabled) or more seconds")
    if min_headroom_gb is not None and min_headroom_gb < 0:
        raise InvalidArguments("--min-headroom-gb must not be negative")
    return {"idle_timeout_s": idle_timeout or 0, "keep_loaded": keep_loaded, "min_headroom_gb": min_headroom_gb}


def api_key_file(raw: str | None) -> str | None:
    """Return the absolute API key file, refusing one that does not exist."""
    if raw is None:
        return None
    path = Path(raw).expanduser().absolute()
    if not path.is_file():
        raise InvalidArguments(f"--api-key-file {raw} is not a file", details={"path": raw})
    if path.stat().st_mode & 0o077:
        # The gateway refuses keys others can read; say so at review time, not after confirm.
        raise InvalidArguments(f"--api-key-file {path} is readable by other users; chmod 600 it",
                               details={"path": str(path)})
    return str(path)


def gateway_config(plan: dict[str, Any], serve_dir: Path, worker_argv: list[str],
                   jit: dict[str, Any]) -> dict[str, Any]:
    """Return the gateway config document (schemas/gateway_config.json) the confirm step writes."""
    port = plan["port"]
    source = plan["source"]
    adapter = plan.get("adapter")
    checks = [] if adapter is None else [
        {"path": str(Path(adapter["path"]) / f["name"]), "sha256": f["sha256"], "size": f["size"]}
        for f in adapter["files"]]
    receipt = (adapter or {}).get("training_receipt")
    if receipt is not None:  # the receipt that vouches for the adapter must not change under the gateway either
        checks.append({"path": receipt["path"], "sha256": receipt["sha256"], "size": receipt["size"]})
    return {
        "format_version": "1.0",
        "host": plan["host"],
        "port": port,
        "model_id": source.get("repo") or source["path"],
        "model_path": source["path"],
        "max_tokens": plan["max_tokens"],
        "worker": {"argv": worker_argv, "env": plan["env"], "cwd": plan["cwd"], "readiness": plan["readiness"],
                   "ready_timeout_s": plan["ready_timeout_s"], "log_path": str(serve_dir / f"{port}.worker.log")},
        "weight_bytes": jit["weight_bytes"],
        "policy": jit["policy"],
        "policy_path": str(serve_dir / f"{port}.policy.json"),
        "control_token_path": str(serve_dir / f"{port}.token"),
        "api_key_path": jit["api_key_file"],
        "file_checks": checks,
        "max_body_bytes": MAX_BODY_BYTES,
    }
