"""Build the deterministic plan of ``serve start`` from its arguments and the files they name."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from mlx_agent import FORMAT_VERSION
from mlx_agent.errors import InvalidArguments
from mlx_agent.plan.defaults import DEFAULT_MAX_TOKENS, DEFAULT_READY_TIMEOUT, HOST, OFFLINE_ENV
from mlx_agent.plan.runtime import PACKAGE_DIR, load_recipe, resolve_runtime
from mlx_agent.plan.source import resolve_path_source, resolve_repo_source

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any



class ServeRequest:
    """What the user asked ``serve start`` for, before any file is read.

    A plain class: a dataclass would import ``inspect`` on every preview, a third of its start-up time.
    """

    __slots__ = ("max_tokens", "path", "port", "ready_timeout", "repo", "runtime", "runtime_executable")

    def __init__(self, *, path: str | None = None, repo: str | None = None, runtime: str = "mlx_lm",
                 port: int | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                 ready_timeout: float = DEFAULT_READY_TIMEOUT, runtime_executable: str | None = None) -> None:
        self.path = path
        self.repo = repo
        self.runtime = runtime
        self.port = port
        self.max_tokens = max_tokens
        self.ready_timeout = ready_timeout
        self.runtime_executable = runtime_executable


def _validate(req: ServeRequest) -> None:
    if (req.path is None) == (req.repo is None):
        raise InvalidArguments("give exactly one of --path or --repo")
    if req.port is not None and not 1 <= req.port <= 65535:
        raise InvalidArguments(f"--port {req.port} is outside 1-65535", details={"port": req.port})
    if req.max_tokens < 1:
        raise InvalidArguments("--max-tokens must be at least 1", details={"max_tokens": req.max_tokens})
    if req.ready_timeout <= 0:
        raise InvalidArguments("--ready-timeout must be positive", details={"ready_timeout": req.ready_timeout})


def _child_env(runtime: dict[str, Any]) -> dict[str, str]:
    env = dict(OFFLINE_ENV)
    if runtime["launcher"] == "wrapped":
        # From a checkout the package is not installed: point the child at the source tree it was planned from.
        root = str(PACKAGE_DIR.parent)
        installed = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        if root not in installed:
            env["PYTHONPATH"] = root
    return env


def build_argv(runtime: dict[str, Any], native_args: list[str]) -> list[str]:
    """Return the exact argv the server is launched with."""
    if runtime["launcher"] == "wrapped":
        return [runtime["interpreter"], "-m", runtime["module"], runtime["name"], *native_args]
    return [runtime["executable"], *native_args]


def build_serve_plan(req: ServeRequest) -> dict[str, Any]:
    """Return the plan (without its hash) for one server; reads files, writes nothing."""
    _validate(req)
    recipe, _ = load_recipe(req.runtime)
    source = resolve_path_source(req.path) if req.path is not None else resolve_repo_source(req.repo or "")
    runtime = resolve_runtime(req.runtime, req.runtime_executable)
    port = req.port if req.port is not None else int(recipe["default_port"])
    values = {"model": source["path"], "host": HOST, "port": str(port), "max_tokens": str(req.max_tokens)}
    native_args = [arg.format(**values) for arg in recipe["argv"]]
    return {
        "format_version": FORMAT_VERSION,
        "operation": "serve.start",
        "source": source,
        "runtime": runtime,
        "host": HOST,
        "port": port,
        "base_url": f"http://{HOST}:{port}",
        "max_tokens": req.max_tokens,
        "ready_timeout_s": req.ready_timeout,
        "readiness": recipe["readiness"],
        "argv": build_argv(runtime, native_args),
        "env": _child_env(runtime),
        "cwd": os.sep,
    }


def model_ids(plan: dict[str, Any]) -> set[str]:
    """Return the names a wired config may use for the plan's model."""
    source = plan["source"]
    ids = {source["path"]}
    if source.get("repo"):
        ids.add(source["repo"])
    return ids


def resolved_path(raw: str) -> Path:
    """Return an absolute, resolved path for a user-supplied path option."""
    return Path(raw).expanduser().resolve()
