"""Build the deterministic plan of ``serve start`` from its arguments and the files they name."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path

from mlx_agent import FORMAT_VERSION
from mlx_agent.errors import (
    InvalidArguments,
    LaunchdJitUnsupported,
    LaunchdTrainingReceiptUnsupported,
    UnsupportedRuntime,
)
from mlx_agent.home import receipts_dir
from mlx_agent.plan import accel
from mlx_agent.plan.adapter import expectations, resolve_adapter
from mlx_agent.plan.canonical import canonical_json
from mlx_agent.plan.defaults import DEFAULT_MAX_TOKENS, DEFAULT_READY_TIMEOUT, HOST, OFFLINE_ENV
from mlx_agent.plan.recipes import AUTO, load_recipe
from mlx_agent.plan.runtime import resolve_runtime
from mlx_agent.plan.runtime_select import select_runtime
from mlx_agent.plan.source import resolve_path_source, resolve_repo_source
from mlx_agent.resources import PACKAGE_DIR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any



class ServeRequest:
    """What the user asked ``serve start`` for, before any file is read.

    A plain class: a dataclass would import ``inspect`` on every preview, a third of its start-up time.
    """

    __slots__ = ("adapter_path", "api_key_file", "chat_template_args", "idle_timeout", "jit", "keep_loaded",
                 "m5_prefill", "max_tokens", "min_headroom_gb", "path", "port", "prompt_lookup", "ready_timeout",
                 "receipts_dir", "repo", "restart", "runtime", "runtime_executable", "supervisor", "thinking",
                 "training_receipt", "unit_dir")

    def __init__(self, *, path: str | None = None, repo: str | None = None, runtime: str = "mlx_lm",
                 port: int | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
                 ready_timeout: float = DEFAULT_READY_TIMEOUT, runtime_executable: str | None = None,
                 thinking: str | None = None, chat_template_args: str | None = None,
                 supervisor: str = "mlx-agent", unit_dir: str | None = None, restart: str = "on-failure",
                 receipts_dir: str | None = None, adapter_path: str | None = None, jit: bool = False,
                 idle_timeout: float | None = None, keep_loaded: bool = False, min_headroom_gb: float | None = None,
                 api_key_file: str | None = None, training_receipt: str | None = None, prompt_lookup: bool = False,
                 m5_prefill: bool = False) -> None:
        self.path = path
        self.repo = repo
        self.runtime = runtime
        self.port = port
        self.max_tokens = max_tokens
        self.ready_timeout = ready_timeout
        self.runtime_executable = runtime_executable
        self.thinking = thinking  # None keeps the template's own default; "on" or "off"
        self.chat_template_args = chat_template_args  # a JSON object, as given on the command line
        self.supervisor = supervisor  # "mlx-agent" (we start and watch it), "launchd" or "systemd"
        self.unit_dir = unit_dir
        self.restart = restart
        self.receipts_dir = receipts_dir  # where the log goes, which a unit names
        self.adapter_path = adapter_path
        self.jit = jit
        self.idle_timeout = idle_timeout
        self.keep_loaded = keep_loaded
        self.min_headroom_gb = min_headroom_gb
        self.api_key_file = api_key_file
        self.training_receipt = training_receipt  # selects base and adapter together
        self.prompt_lookup = prompt_lookup  # --prompt-lookup: prompt-lookup decoding (plan/accel.py)
        self.m5_prefill = m5_prefill  # --m5-prefill: the M5 Q4 prefill kernel (plan/accel.py)


def _validate(req: ServeRequest) -> None:
    if req.training_receipt is not None:
        if req.path is not None or req.repo is not None or req.adapter_path is not None:
            raise InvalidArguments("--training-receipt selects the base model and adapter itself; "
                                   "do not combine it with --path, --repo or --adapter-path")
        if req.supervisor != "mlx-agent":
            raise LaunchdTrainingReceiptUnsupported("a training receipt cannot be installed as a launchd or "
                                                    "systemd unit")
    elif (req.path is None) == (req.repo is None):
        raise InvalidArguments("give exactly one of --path or --repo (or --training-receipt)")
    if req.port is not None and not 1 <= req.port <= 65535:
        raise InvalidArguments(f"--port {req.port} is outside 1-65535", details={"port": req.port})
    if req.max_tokens < 1:
        raise InvalidArguments("--max-tokens must be at least 1", details={"max_tokens": req.max_tokens})
    if req.ready_timeout <= 0:
        raise InvalidArguments("--ready-timeout must be positive", details={"ready_timeout": req.ready_timeout})
    if req.thinking not in (None, "on", "off"):
        raise InvalidArguments("--thinking must be on or off", details={"thinking": req.thinking})
    if req.supervisor not in ("mlx-agent", "launchd", "systemd"):
        raise InvalidArguments("give at most one of --launchd and --systemd")
    if req.supervisor == "mlx-agent" and (req.unit_dir is not None or req.restart != "on-failure"):
        raise InvalidArguments("--unit-dir and --restart apply only with --launchd or --systemd")
    policy_flags = req.idle_timeout is not None or req.keep_loaded or req.min_headroom_gb is not None
    if not req.jit and (policy_flags or req.api_key_file is not None):
        raise InvalidArguments("--idle-timeout, --keep-loaded, --min-headroom-gb and --api-key-file require --jit")
    if req.jit and req.supervisor != "mlx-agent":
        raise LaunchdJitUnsupported("--jit cannot be installed as a launchd or systemd unit")
    if req.runtime == AUTO and req.runtime_executable is not None:
        raise InvalidArguments("--runtime-executable needs an explicit --runtime naming what it provides")


def _template_args(raw: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise InvalidArguments(f"--chat-template-args is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidArguments("--chat-template-args must be a JSON object")
    return value


def thinking_args(recipe: dict[str, Any], req: ServeRequest) -> tuple[str, dict[str, Any], list[str]]:
    """Return the plan's thinking state, the merged chat template args, and the extra server arguments."""
    capabilities = recipe.get("capabilities", {})
    template_args = _template_args(req.chat_template_args)
    if req.chat_template_args is not None and not capabilities.get("chat_template_args"):
        raise UnsupportedRuntime(f"runtime {recipe['name']} takes no chat template arguments",
                                 details={"runtime": recipe["name"]})
    cap = capabilities.get("thinking")
    extra: list[str] = []
    state = "default" if req.thinking is None else req.thinking
    if req.thinking is not None and not cap:
        state = "unsupported"  # the runtime has no switch: it starts unchanged, and the plan says so
    elif req.thinking is not None and cap["kind"] == "chat_template_args":
        template_args = {**template_args, cap["key"]: req.thinking == "on"}
    elif req.thinking is not None and cap["kind"] == "flags":
        extra = list(cap[req.thinking])
    if template_args:
        extra = [*extra, capabilities["chat_template_args"], canonical_json(template_args)]
    return state, template_args, extra


def _child_env(runtime: dict[str, Any]) -> dict[str, str]:
    env = dict(OFFLINE_ENV)
    if runtime["launcher"] == "wrapped":
        # From a checkout the package is not installed: point the child at the source tree it was planned from.
        root = str(PACKAGE_DIR.parent)
        installed = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        if root not in installed:
            env["PYTHONPATH"] = root
    return env


def _trained(raw: str) -> dict[str, Any]:
    """Return what a completed training receipt vouches for, checked now, with the receipt's own identity."""
    from mlx_agent.plan.training_receipt import check_training_receipt, load_training_receipt

    receipt, receipt_sha = load_training_receipt(raw)
    path = Path(raw).expanduser().absolute()
    checked = check_training_receipt(receipt, path.parent)
    checked["receipt"] = {"path": str(path), "sha256": receipt_sha, "size": path.stat().st_size,
                          "id": receipt.get("id")}
    return checked


def _adapter(req: ServeRequest, recipe: dict[str, Any], runtime: dict[str, Any],
             trained: dict[str, Any] | None) -> dict[str, Any] | None:
    if req.adapter_path is None and trained is None:
        return None
    if not recipe.get("capabilities", {}).get("adapter"):
        # mlx_vlm would silently ignore mlx_lm adapter weights: refuse rather than serve the base model.
        raise UnsupportedRuntime(f"runtime {recipe['name']} cannot serve an mlx_lm adapter",
                                 details={"runtime": recipe["name"]})
    if not runtime["adapter_enabled"]:
        raise UnsupportedRuntime("an adapter is served only through mlx-agent's own entry, which rechecks it "
                                 "before loading; a --runtime-executable from another environment cannot",
                                 details={"runtime": recipe["name"], "launcher": runtime["launcher"]})
    if trained is None:
        return resolve_adapter(req.adapter_path or "")
    # The receipt's recorded hashes were just rechecked; the adapter is still validated like any other.
    return {**resolve_adapter(trained["adapter"]["path"]), "training_receipt": trained["receipt"]}


def _make_jit(plan: dict[str, Any], req: ServeRequest, recipe: dict[str, Any], runtime: dict[str, Any],
              worker_native: list[str]) -> None:
    """Turn a plan into a JIT gateway's: the gateway runs on the port, the planned server becomes its worker."""
    from mlx_agent.plan import jit

    if not recipe.get("capabilities", {}).get("jit"):
        raise UnsupportedRuntime(f"runtime {recipe['name']} has no JIT support in its recipe")
    serve_dir = receipts_dir("serve", req.receipts_dir)
    section = {"policy": jit.policy(req.idle_timeout, req.keep_loaded, req.min_headroom_gb),
               "api_key_file": jit.api_key_file(req.api_key_file),
               "weight_bytes": jit.weight_bytes(plan["source"], plan["adapter"])}
    config = jit.gateway_config(plan, serve_dir, build_argv(runtime, worker_native), section)
    config_path = str(serve_dir / f"{plan['port']}.gateway.json")
    plan["jit"] = {**section, "config_path": config_path, "config": config}
    plan["argv"] = [str(Path(sys.executable).absolute()), "-m", jit.GATEWAY_MODULE, "--config", config_path]
    plan["env"] = _child_env({"launcher": "wrapped"})  # the gateway is our own module, like the wrapped entry
    plan["readiness"] = jit.GATEWAY_READINESS


def build_argv(runtime: dict[str, Any], native_args: list[str]) -> list[str]:
    """Return the exact argv the server is launched with."""
    if runtime["launcher"] == "wrapped":
        return [runtime["interpreter"], "-m", runtime["module"], runtime["name"], *native_args]
    if runtime["launcher"] == "module":
        return [runtime["interpreter"], "-m", runtime["module"], *native_args]
    return [*runtime["argv_prefix"], *native_args]


def build_serve_plan(req: ServeRequest) -> dict[str, Any]:
    """Return the plan (without its hash) for one server; reads files, writes nothing."""
    _validate(req)
    if req.runtime != AUTO:
        load_recipe(req.runtime)  # an unknown runtime is refused before any file is read
    trained = _trained(req.training_receipt) if req.training_receipt is not None else None
    if trained is not None:
        source, config = trained["base"], trained["base_config"]
    elif req.path is not None:
        source, config = resolve_path_source(req.path)
    else:
        source, config = resolve_repo_source(req.repo or "")
    name, reason = select_runtime(req.runtime, config, req.runtime_executable)
    recipe, recipe_sha = load_recipe(name)
    runtime = resolve_runtime(name, recipe, recipe_sha, req.runtime_executable)
    thinking, template_args, extra_args = thinking_args(recipe, req)
    adapter = _adapter(req, recipe, runtime, trained)
    if adapter is not None:
        extra_args += ["--adapter-path", adapter["path"], *expectations(adapter)]
    decode = accel.decode_profile(req.prompt_lookup, recipe, runtime, adapter=adapter is not None)
    prefill = accel.prefill_kernel(req.m5_prefill, recipe, runtime, config, adapter=adapter is not None)
    extra_args += accel.entry_flags(decode, prefill, runtime)  # before any argv is built: JIT workers get them too
    port = req.port if req.port is not None else int(recipe["default_port"])
    values = {"model": source["path"], "host": HOST, "port": str(port), "max_tokens": str(req.max_tokens)}
    native_args = [*(arg.format(**values) for arg in recipe["argv"]), *extra_args]
    plan = {
        "format_version": FORMAT_VERSION,
        "operation": "serve.start",
        "supervisor": req.supervisor,
        "source": source,
        "requested_runtime": req.runtime,
        "runtime_reason": reason,
        "runtime": runtime,
        "thinking": thinking,
        "chat_template_args": template_args,
        "adapter": adapter,
        "decode_profile": decode,
        "prefill_kernel": prefill,
        "jit": None,
        "host": HOST,
        "port": port,
        "base_url": f"http://{HOST}:{port}",
        "max_tokens": req.max_tokens,
        "ready_timeout_s": req.ready_timeout,
        "readiness": recipe.get("native_readiness", recipe["readiness"]) if runtime["launcher"] == "native"
        else recipe["readiness"],
        "argv": build_argv(runtime, native_args),
        "env": _child_env(runtime),
        "cwd": os.sep,
    }
    if req.jit:
        _make_jit(plan, req, recipe, runtime, [*(arg.format(**{**values, "port": "{port}"}) for arg in recipe["argv"]),
                                               *extra_args])
    if req.supervisor != "mlx-agent":
        from mlx_agent.plan.units import build_unit  # plistlib and configparser only when a unit is asked for

        log = str(receipts_dir("serve", req.receipts_dir) / f"{port}.log")
        plan["unit"] = build_unit(req.supervisor, plan, req.unit_dir, log, req.restart)
    return plan


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
