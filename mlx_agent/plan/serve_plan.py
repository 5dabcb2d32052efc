"""Build the deterministic plan of ``serve start``: a front on the port, and the models behind it.

Reads the files the request names, writes nothing. A single-model request is a front with one model; a
``--models`` file gives a fleet (``models_file``). Each model's part is ``model_plan.build_model_plan``, the
front's ``front.py``.
"""

from __future__ import annotations

import os

from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import LaunchdJitUnsupported, LaunchdTrainingReceiptUnsupported
from mlx_agent.home import receipts_dir
from mlx_agent.plan.front import FRONT_READINESS, front_argv, front_record, worker_paths
from mlx_agent.plan.model_plan import ResolvedModel, build_model_plan, child_env
from mlx_agent.plan.model_spec import model_policy
from mlx_agent.plan.requests import ModelRequest
from mlx_agent.policy import policy_from_options
from mlx_agent.port_files import PortFiles
from mlx_agent.wire import HOST, PLAN_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.plan.requests import ServeRequest
    from mlx_agent.records.plan import ModelsFileRecord, ServePlan

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
    if req.models is not None:
        # Every option a [[model]] table takes, generated from the one declaration: none may be dropped.
        given = [
            opt.flag for opt in ModelRequest.OPTIONS if opt.scope == "both" and getattr(req, opt.dest) != opt.default
        ]
        if given:
            raise InvalidArguments(
                f"--models names each model's options in its [[model]] table; do not also give {', '.join(given)}",
                details={"options": given},
            )
    if req.training_receipt is not None and supervisor != "mlx-agent":
        raise LaunchdTrainingReceiptUnsupported("a training receipt cannot be installed as a launchd or systemd unit")
    if req.jit and supervisor != "mlx-agent":
        raise LaunchdJitUnsupported("--jit cannot be installed as a launchd or systemd unit")


def fleet_requests(req: ServeRequest) -> tuple[list[ModelRequest], ModelsFileRecord | None]:
    """Return the models the request asks for: its one model, or every table of its models file."""
    if req.models is None:
        return [req.model()], None
    from mlx_agent.plan.models_file import eager_conflict, model_requests, read_models_file

    models = read_models_file(req.models)
    if not req.jit:
        eager_conflict(models)
    given = {opt.dest: getattr(req, opt.dest) for opt in ModelRequest.OPTIONS if opt.scope == "cli"}
    specs = model_requests(models, given)
    if req.supervisor != "mlx-agent" and any(s.training_receipt for s in specs):
        raise LaunchdTrainingReceiptUnsupported("a training receipt cannot be installed as a launchd or systemd unit")
    return specs, models.record


def _check_max_loaded(req: ServeRequest, specs: list[ModelRequest]) -> None:
    preloaded = sum(1 for s in specs if model_policy(s, jit=req.jit)["preload"])
    if req.max_loaded is not None and preloaded > req.max_loaded:
        raise InvalidArguments(
            f"--max-loaded {req.max_loaded} is fewer than the {preloaded} models the front loads at start",
            details={"max_loaded": req.max_loaded, "preloaded": preloaded},
        )


def build_serve_plan(req: ServeRequest) -> ServePlan:
    """Return the plan (without its hash) for one server; reads files, writes nothing."""
    _validate(req)
    headroom = policy_from_options(req.idle_timeout, bool(req.keep_loaded), req.min_headroom_gb).min_headroom_gb
    specs, models_file = fleet_requests(req)
    _check_max_loaded(req, specs)
    resolved = [ResolvedModel(spec) for spec in specs]
    port = req.port if req.port is not None else resolved[0].default_port
    serve_dir = receipts_dir("serve", req.receipts_dir)
    front = front_record(
        serve_dir,
        port,
        jit=req.jit,
        api_key=req.api_key_file,
        min_headroom_gb=headroom,
        max_loaded=req.max_loaded,
        log_prompts=req.log_prompts,
        max_queue=req.max_queue,
        stall_timeout=req.stall_timeout,
    )
    models = []
    for index, model in enumerate(resolved):  # every path of a model's plan is known once the port is
        log_path, hostfile_path = worker_paths(serve_dir, port, index)
        policy = model_policy(model.spec, jit=req.jit)
        models.append(
            build_model_plan(
                model,
                policy,
                req.ready_timeout,
                log_path=log_path,
                hostfile_path=hostfile_path,
                front=front,
                prefix_cache_path=PortFiles(serve_dir, port).prefix_cache(index),
            )
        )
    preloaded = sum(1 for m in models if m["policy"]["preload"])
    plan: ServePlan = {
        "format_version": PLAN_VERSION,
        "operation": "serve.start",
        "supervisor": req.supervisor,
        "host": HOST,
        "port": port,
        "base_url": f"http://{HOST}:{port}",
        "front": front,
        "models": models,
        "argv": front_argv(front["config_path"]),
        "env": child_env("wrapped"),  # the front is our own module, like the wrapped entry
        "cwd": os.sep,
        "readiness": FRONT_READINESS,
        "ready_timeout": req.ready_timeout * max(1, preloaded),  # --ready-timeout is per model loaded at start
    }
    if models_file is not None:
        plan["models_file"] = models_file
    if req.supervisor != "mlx-agent":
        from mlx_agent.plan.units import build_unit  # plistlib and configparser only when a unit is asked for

        log = str(PortFiles(serve_dir, port).log)
        plan["unit"] = build_unit(req.supervisor, plan, req.unit_dir, log, req.restart)
    return plan


def model_ids(plan: ServePlan) -> set[str]:
    """Return the names a wired config may use for the plan's models."""
    ids: set[str] = set()
    for model in plan["models"]:
        source = model["source"]
        ids |= {source["path"], model["served_model_name"]}
        if source.get("repo"):
            ids.add(source["repo"])
    return ids
