"""The front of a serve plan: the one HTTP server on the port, its private files, and the config it reads.

Every server is a front (``python -m mlx_agent.gateway``) in front of its models' workers. An eager front
loads its models when it starts, so its readiness means loaded; a JIT front loads a model on the first
request that names it. The front's config is a pure projection of the plan (``front_config``), written at
confirm; only the control token is not in the plan (random, in its own 0600 file).
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlx_agent.errors import InvalidArguments
from mlx_agent.files import sha256_file
from mlx_agent.port_files import PortFiles
from mlx_agent.wire import (
    BODY_GRACE_S,
    BODY_MIN_RATE,
    BODY_TIMEOUT_S,
    FRONT_CONFIG_VERSION,
    FRONT_MODULE,
    HEADER_TIMEOUT_S,
    KEEPALIVE_TIMEOUT_S,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    MAX_QUEUE,
    STALL_TIMEOUT_S,
    WORKER_MODEL_NAME,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.records.front import FrontConfig, FrontModelConfig
    from mlx_agent.records.plan import FrontRecord, ModelPlan, ReadinessRecord, ServePlan

# The front answers /health at once; "ready" says every model it preloads has loaded. Its "status" is not asked:
# "degraded" (a disk under its floor, mlx_agent.disk) is still ready, and serve start warns of it.
FRONT_READINESS: ReadinessRecord = {"path": "/health", "status": 200, "json": {"ready": True}}
# AF_UNIX paths are limited to 108 bytes; a longer state directory gets a private temporary one at start.
MAX_SOCKET_DIR = 80


def front_paths(serve_dir: Path, port: int) -> dict[str, str]:
    """Return where the front's private files live, beside the receipt of ``port``."""
    files = PortFiles(serve_dir, port)
    return {
        "config_path": str(files.front_config),
        "token_path": str(files.token),
        "policy_path": str(files.policy),
    }


def worker_paths(serve_dir: Path, port: int, index: int) -> tuple[Path, Path]:
    """Return the log of the ``index``-th model's worker (every load appends to it) and its group's host list.

    Both live beside the receipt of ``port``, private to it: confirm writes the reviewed hosts there.
    """
    files = PortFiles(serve_dir, port)
    return files.worker_log(index), files.worker_hosts(index)


def socket_dir(serve_dir: Path, port: int) -> str:
    """Return the directory the front creates (0700) for its workers' sockets, or "" for a private temp one."""
    path = PortFiles(serve_dir, port).sockets
    return str(path) if len(str(path)) <= MAX_SOCKET_DIR else ""


def api_key_file(raw: str | None) -> str | None:
    """Return the absolute API key file, refusing one that does not exist or that others can read."""
    if raw is None:
        return None
    path = Path(raw).expanduser().absolute()
    if not path.is_file():
        raise InvalidArguments(f"--api-key-file {raw} is not a file", details={"path": raw})
    if path.stat().st_mode & 0o077:
        # The front refuses keys others can read; say so at review time, not after confirm.
        raise InvalidArguments(
            f"--api-key-file {path} is readable by other users; chmod 600 it", details={"path": str(path)}
        )
    return str(path)


def front_record(
    serve_dir: Path,
    port: int,
    *,
    jit: bool,
    api_key: str | None,
    min_headroom_gb: float | None,
    max_loaded: int | None = None,
    log_prompts: bool = False,
    max_queue: int = MAX_QUEUE,
    stall_timeout: float = STALL_TIMEOUT_S,
) -> FrontRecord:
    """Return the plan's ``front`` record."""
    paths = front_paths(serve_dir, port)
    return {
        "mode": "jit" if jit else "eager",
        "config_path": paths["config_path"],
        "token_path": paths["token_path"],
        "policy_path": paths["policy_path"],
        "api_key_file": api_key_file(api_key),
        "min_headroom_gb": min_headroom_gb,
        "max_body_bytes": MAX_BODY_BYTES,
        "max_connections": MAX_CONNECTIONS,
        "header_timeout": HEADER_TIMEOUT_S,
        "keepalive_timeout": KEEPALIVE_TIMEOUT_S,
        "body_timeout": BODY_TIMEOUT_S,
        "body_min_rate": BODY_MIN_RATE,
        "body_grace": BODY_GRACE_S,
        "socket_dir": socket_dir(serve_dir, port),
        "max_loaded": max_loaded,
        "log_prompts": log_prompts,
        "max_queue": max_queue,
        "stall_timeout": stall_timeout,
        "interpreter_sha256": sha256_file(Path(sys.executable).resolve()),
        "sources": front_sources(),
    }


# The modules the front runs besides gateway/ (what ``python -m mlx_agent.gateway`` imports).
FRONT_MODULES = (
    "agent_names.py",
    "load_memory.py",
    "api_errors.py",
    "bodies.py",
    "canonical.py",
    "disk.py",
    "errors/__init__.py",
    "exiting.py",
    "files.py",
    "identity.py",
    "kept_cache.py",
    "model_config.py",
    "policy.py",
    "readiness.py",
    "records/front.py",
    "records/plan.py",
    "records/types.py",
    "spawn.py",
    "wire.py",
    "worker_routes.py",
)


def front_sources() -> dict[str, str]:
    """Return the sha256 of each source the front runs, keyed by its package-relative name."""
    from mlx_agent.resources import PACKAGE_DIR

    files = [*sorted((PACKAGE_DIR / "gateway").rglob("*.py")), *(PACKAGE_DIR / m for m in FRONT_MODULES)]
    return {p.relative_to(PACKAGE_DIR).as_posix(): sha256_file(p) for p in files if "__pycache__" not in p.parts}


def front_argv(config_path: str) -> list[str]:
    """Return the front's exact argv."""
    return [str(Path(sys.executable).absolute()), "-m", FRONT_MODULE, "--config", config_path]


def hidden_names(model: ModelPlan) -> list[str]:
    """Return names a request may use for a model without them being listed: the worker's, the path, the repo."""
    source = model["source"]
    names = [WORKER_MODEL_NAME, source["path"]]
    if source.get("repo"):
        names.append(source["repo"])
    return [n for n in names if n != model["served_model_name"]]


def worker_slots(model: ModelPlan) -> int | None:
    """Return how many requests the model's worker runs at once (the front holds the rest), or None if unknown.

    A runtime whose recipe has ``batch_slots`` batches that many (mlx_lm: its --decode-concurrency default), or the
    plan's ``--decode-concurrency``, except under an option its ``serial_with`` names (a draft model, a quantized
    KV cache), where it serves one at a time; a runtime without it is not known to batch, so the front does not
    hold its requests.
    """
    from mlx_agent.plan.recipes import load_recipe

    capabilities = load_recipe(model["runtime"]["name"])[0]["capabilities"]
    slots = capabilities.get("batch_slots")
    if slots is None:
        return None
    used = {"draft_model": model["draft"] is not None, "kv_bits": model["kv_cache"] is not None}
    if any(used[option] for option in capabilities.get("serial_with", [])):
        return 1
    return model.get("decode_concurrency") or slots


VISION_CACHE_DEFAULT = 20  # mlx-vlm's --vision-cache-size default (mlx_vlm/server/cli.py)
VLM_CACHES_RUNTIME = "mlx-vlm"  # the runtime whose chat workers keep both caches (status and top show them)


def vision_cache_entries(model: ModelPlan) -> int | None:
    """Return how many images' vision features ``model``'s worker keeps (None: not an mlx-vlm chat worker)."""
    if model["runtime"]["name"] != VLM_CACHES_RUNTIME:
        return None
    size = model.get("vision_cache_size")
    return size if isinstance(size, int) else VISION_CACHE_DEFAULT


def model_config(model: ModelPlan) -> FrontModelConfig:
    """Return one model of the front's config, as the front reads it."""
    return {
        "served_model_name": model["served_model_name"],
        "alias": model["alias"],
        "hidden_names": hidden_names(model),
        "max_tokens": model["max_tokens"],
        "max_tokens_ceiling": model["max_tokens_ceiling"],
        "context_window": model["context_window"],
        "weight_bytes": model["weight_bytes"],
        "file_checks": model["file_checks"],
        "runtime_checks": model["runtime_checks"],
        "source": model["source"],
        "draft_source": None if model["draft"] is None else model["draft"]["source"],
        "prompt_cache": model["prompt_cache"],
        "policy": model["policy"],
        "worker": model["worker"],
        "worker_slots": worker_slots(model),
        "greedy_alone": False,  # under --prompt-lookup the worker batches a greedy request while others run
        "kv_cache": model["kv_cache"],
        "prefix_cache": model.get("prefix_cache"),
        "vision_cache_size": vision_cache_entries(model),
    }


def front_config(plan: ServePlan) -> FrontConfig:
    """Return the config document (``schemas/front_config.json``) confirm writes for the plan's front."""
    front = plan["front"]
    return {
        "format_version": FRONT_CONFIG_VERSION,
        "host": "127.0.0.1",
        "port": plan["port"],
        "mode": "jit" if front["mode"] == "jit" else "eager",
        "models": [model_config(m) for m in plan["models"]],
        "min_headroom_gb": front["min_headroom_gb"],
        "policy_path": front["policy_path"],
        "control_token_path": front["token_path"],
        "api_key_path": front["api_key_file"],
        "max_body_bytes": front["max_body_bytes"],
        "max_connections": front["max_connections"],
        "header_timeout": front["header_timeout"],
        "keepalive_timeout": front["keepalive_timeout"],
        "body_timeout": front["body_timeout"],
        "body_min_rate": front["body_min_rate"],
        "body_grace": front["body_grace"],
        "socket_dir": front["socket_dir"],
        "max_loaded": front["max_loaded"],
        "log_prompts": front["log_prompts"],
        "max_queue": front.get("max_queue", MAX_QUEUE),
        "stall_timeout": front.get("stall_timeout", STALL_TIMEOUT_S),
    }
