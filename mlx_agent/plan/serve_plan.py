"""Build the deterministic plan of ``serve start``: a front on the port, and the models behind it.

Reads the files the request names, writes nothing. A single-model request is a front with one model; a
``--models`` file gives a fleet (``models_file``). Each model's part is ``model_plan.build_model_plan``, the
front's ``front.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlx_agent.errors import (
    InvalidArguments,
    LaunchdJitUnsupported,
    LaunchdTrainingReceiptUnsupported,
    ModelsFileInvalid,
)
from mlx_agent.home import receipts_dir
from mlx_agent.plan.front import FRONT_READINESS, front_argv, front_record, worker_log
from mlx_agent.plan.model_plan import build_model_plan, child_env
from mlx_agent.plan.model_spec import ModelSpec
from mlx_agent.plan.recipes import load_recipe
from mlx_agent.policy import policy_from_options
from mlx_agent.wire import HOST, PLAN_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.records import ModelsFileRecord, ServePlan
    from mlx_agent.requests import ServeRequest

SUPERVISORS = ("mlx-agent", "launchd", "systemd")
# The options that describe one model: a models file gives them per [[model]] table instead.
MODEL_OPTIONS = (
    ("path", "--path", None),
    ("repo", "--repo", None),
    ("training_receipt", "--training-receipt", None),
    ("adapter_path", "--adapter-path", None),
    ("runtime", "--runtime", "mlx_lm"),
    ("runtime_executable", "--runtime-executable", None),
    ("served_model_name", "--served-model-name", None),
    ("alias", "--alias", ()),
    ("thinking", "--thinking", None),
    ("chat_template_args", "--chat-template-args", None),
    ("prompt_lookup", "--prompt-lookup", False),
    ("m5_prefill", "--m5-prefill", False),
    ("draft_model", "--draft-model", None),
    ("num_draft_tokens", "--num-draft-tokens", None),
    ("kv_bits", "--kv-bits", None),
    ("kv_group_size", "--kv-group-size", None),
    ("hosts", "--hosts", None),
    ("hostfile", "--hostfile", None),
    ("backend", "--backend", "ring"),
    ("pipeline", "--pipeline", False),
    ("ring_port", "--ring-port", None),
    ("max_tokens", "--max-tokens", 512),
    ("max_tokens_ceiling", "--max-tokens-ceiling", None),
    ("idle_timeout", "--idle-timeout", None),
    ("keep_loaded", "--keep-loaded", False),
)


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
        given = [flag for attr, flag, default in MODEL_OPTIONS if getattr(req, attr) != default]
        if given:
            raise InvalidArguments(
                f"--models names each model's options in its [[model]] table; do not also give {', '.join(given)}",
                details={"options": given},
            )
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
        draft_model=req.draft_model,
        num_draft_tokens=req.num_draft_tokens,
        kv_bits=req.kv_bits,
        kv_group_size=req.kv_group_size,
        hosts=req.hosts,
        hostfile=req.hostfile,
        backend=req.backend,
        pipeline=req.pipeline,
        ring_port=req.ring_port,
        max_tokens=req.max_tokens,
        max_tokens_ceiling=req.max_tokens_ceiling,
        idle_timeout=policy.idle_timeout if req.jit else 0,
        keep_loaded=policy.keep_loaded or not req.jit,
        preload=not req.jit,
        verify_weights=req.verify_weights,
        prompt_cache_disk_gb=req.prompt_cache_disk_gb,
    )


def fleet_specs(req: ServeRequest) -> tuple[list[ModelSpec], ModelsFileRecord | None]:
    """Return the models the request asks for: its one model, or every table of its models file."""
    if req.models is None:
        return [model_spec(req)], None
    from mlx_agent.plan.models_file import eager_conflicts, key_line, model_specs, read_models_file

    tables, record, base = read_models_file(req.models)
    conflict = None if req.jit else eager_conflicts(tables)
    if conflict is not None:
        index, key = conflict
        line = key_line(Path(record["path"]).read_text(encoding="utf-8"), index, key)
        raise ModelsFileInvalid(
            f"{record['path']}:{line}: [[model]] {index + 1} ({tables[index]['name']}) sets {key!r}, which asks for "
            "loading on request or unloading: add --jit (an eager front loads every model and keeps it)",
            details={"path": record["path"], "line": line, "key": key, "model": tables[index]["name"]},
        )
    specs = model_specs(
        tables, base, jit=req.jit, verify_weights=req.verify_weights, prompt_cache_disk_gb=req.prompt_cache_disk_gb
    )
    if req.supervisor != "mlx-agent" and any(s.training_receipt for s in specs):
        raise LaunchdTrainingReceiptUnsupported("a training receipt cannot be installed as a launchd or systemd unit")
    return specs, record


def _check_max_loaded(req: ServeRequest, specs: list[ModelSpec]) -> None:
    preloaded = sum(1 for s in specs if s.preload)
    if req.max_loaded is not None and preloaded > req.max_loaded:
        raise InvalidArguments(
            f"--max-loaded {req.max_loaded} is fewer than the {preloaded} models the front loads at start",
            details={"max_loaded": req.max_loaded, "preloaded": preloaded},
        )


def build_serve_plan(req: ServeRequest) -> ServePlan:
    """Return the plan (without its hash) for one server; reads files, writes nothing."""
    _validate(req)
    policy = policy_from_options(req.idle_timeout, req.keep_loaded, req.min_headroom_gb)
    specs, models_file = fleet_specs(req)
    _check_max_loaded(req, specs)
    models = [build_model_plan(spec, Path("/"), req.ready_timeout) for spec in specs]
    port = req.port if req.port is not None else int(load_recipe(models[0]["runtime"]["name"])[0]["default_port"])
    serve_dir = receipts_dir("serve", req.receipts_dir)
    for index, model in enumerate(models):
        model["worker"]["log_path"] = str(worker_log(serve_dir, port, index))
    front = front_record(
        serve_dir,
        port,
        jit=req.jit,
        api_key=req.api_key_file,
        min_headroom_gb=policy.min_headroom_gb,
        max_loaded=req.max_loaded,
        log_prompts=req.log_prompts,
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
