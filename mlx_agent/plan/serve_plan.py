"""Build the deterministic plan of ``serve start``: a front on the port, and the models behind it.

Reads the files the request names, writes nothing. A single-model request is a front with one model; the
model's part is ``model_plan.build_model_plan``, the front's ``front.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlx_agent.errors import InvalidArguments, LaunchdJitUnsupported, LaunchdTrainingReceiptUnsupported
from mlx_agent.home import receipts_dir
from mlx_agent.plan.front import FRONT_READINESS, front_argv, front_record, worker_log
from mlx_agent.plan.model_plan import ModelSpec, build_model_plan, child_env
from mlx_agent.plan.recipes import load_recipe
from mlx_agent.policy import policy_from_options
from mlx_agent.wire import HOST, PLAN_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.records import ServePlan
    from mlx_agent.requests import ServeRequest

SUPERVISORS = ("mlx-agent", "launchd", "systemd")


def _validate(req: ServeRequest) -> None:
    supervisor = req.supervisor
    if supervisor not in SUPERVISORS:
        raise InvalidArguments("give at most one of --launchd and --systemd")
    if req.port is not None and not 1 <= req.port <= 65535:
        raise InvalidArguments(f"--port {req.port} is outside 1-65535", details={"port": req.port})
    if req.ready_timeout <= 0:
        raise InvalidArguments("--ready-timeout must be positive", details={"ready_timeout": req.ready_timeout})
    if supervisor == "mlx-agent" and (req.unit_dir is not None or req.restart != "on-failure"):
        raise InvalidArguments("--unit-dir and --restart apply only with --launchd or --systemd")
    if not req.jit and (req.idle_timeout is not None or req.keep_loaded):
        raise InvalidArguments("--idle-timeout and --keep-loaded require --jit: an eager server keeps its model loaded")
    if req.training_receipt is not None and supervisor != "mlx-agent":
        raise LaunchdTrainingReceiptUnsupported("a training receipt cannot be installed as a launchd or systemd unit")
    if req.jit and supervisor != "mlx-agent":
        raise LaunchdJitUnsupported("--jit cannot be installed as a launchd or systemd unit")


def model_spec(req: ServeRequest) -> ModelSpec:
    """Return the one model a ``serve start`` without a models file asks for."""
    policy = policy_from_options(req.idle_timeout, req.keep_loaded, req.min_headroom_gb)
    return ModelSpec(
        path=req.path,
        repo=req.repo,
        training_receipt=req.training_receipt,
        adapter_path=req.adapter_path,
        runtime=req.runtime,
        runtime_executable=req.runtime_executable,
        served_model_name=req.served_model_name,
        alias=req.alias,
        thinking=req.thinking,
        chat_template_args=req.chat_template_args,
        prompt_lookup=req.prompt_lookup,
        m5_prefill=req.m5_prefill,
        max_tokens=req.max_tokens,
        max_tokens_ceiling=req.max_tokens_ceiling,
        idle_timeout=policy.idle_timeout if req.jit else 0,
        keep_loaded=policy.keep_loaded or not req.jit,
        preload=not req.jit,
    )


def build_serve_plan(req: ServeRequest) -> ServePlan:
    """Return the plan (without its hash) for one server; reads files, writes nothing."""
    _validate(req)
    policy = policy_from_options(req.idle_timeout, req.keep_loaded, req.min_headroom_gb)
    model = build_model_plan(model_spec(req), Path("/"), req.ready_timeout)
    port = req.port if req.port is not None else int(load_recipe(model["runtime"]["name"])[0]["default_port"])
    serve_dir = receipts_dir("serve", req.receipts_dir)
    model["worker"]["log_path"] = str(worker_log(serve_dir, port, 0))
    front = front_record(serve_dir, port, jit=req.jit, api_key=req.api_key_file, min_headroom_gb=policy.min_headroom_gb)
    plan: ServePlan = {
        "format_version": PLAN_VERSION,
        "operation": "serve.start",
        "supervisor": req.supervisor,
        "host": HOST,
        "port": port,
        "base_url": f"http://{HOST}:{port}",
        "front": front,
        "models": [model],
        "argv": front_argv(front["config_path"]),
        "env": child_env("wrapped"),  # the front is our own module, like the wrapped entry
        "cwd": os.sep,
        "readiness": FRONT_READINESS,
        "ready_timeout": req.ready_timeout,
    }
    if req.supervisor != "mlx-agent":
        from mlx_agent.plan.units import build_unit  # plistlib and configparser only when a unit is asked for

        log = str(serve_dir / f"{port}.log")
        plan["unit"] = build_unit(req.supervisor, plan, req.unit_dir, log, req.restart)
    return plan


def model_ids(plan: ServePlan) -> set[str]:
    """Return the names a wired config may use for the plan's models."""
    ids: set[str] = set()
    for model in plan["models"]:
        source = model["source"]
        ids |= {source["path"], model["name"]}
        if source.get("repo"):
            ids.add(source["repo"])
    return ids
