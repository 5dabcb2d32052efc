"""One served model of a plan: its names, its files, the runtime that serves it, and its worker's argv.

``build_model_plan`` reads the files a ``ModelRequest`` (``requests``) names and returns the plan's record of it.
The worker is our wrapped entry (on a Unix socket the front picks per load), or the runtime's own server (on a
private loopback port, given in its environment, and answering only its front's per-launch key), started by the
front.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mlx_agent.canonical import canonical_json
from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import UnsupportedRuntime
from mlx_agent.identity import read_safetensors_header, with_digests
from mlx_agent.media_kinds import CHAT_KINDS
from mlx_agent.model_config import context_window, vision_markers
from mlx_agent.plan import accel
from mlx_agent.plan.adapter import expectations, resolve_adapter, resolve_vlm_adapter
from mlx_agent.plan.agent_support import agents_record, check_options, template_checks
from mlx_agent.plan.decoding import (
    decode_concurrency_plan,
    decoding_args,
    draft_plan,
    kv_cache_plan,
    passed_through,
    passed_through_args,
    prefix_cache_env,
    prefix_cache_plan,
    prompt_cache_args,
    prompt_cache_plan,
)
from mlx_agent.plan.group import group_plan, launcher_argv, model_expectations
from mlx_agent.plan.model_spec import validate_spec
from mlx_agent.plan.recipes import AUTO, load_recipe
from mlx_agent.plan.runtime import resolve_runtime, reviewed_executable, runtime_checks
from mlx_agent.plan.runtime_select import select_runtime
from mlx_agent.plan.source import resolve_path_source, resolve_repo_source
from mlx_agent.plan.worker_plan import bound_template, reply_limits_plan, worker_contract
from mlx_agent.resources import checkout_root
from mlx_agent.wire import (
    HOST,
    KEY_ENV,
    OFFLINE_ENV,
    PORT_ENV,
    PORT_PLACEHOLDER,
    SOCKET_FLAG,
    SOCKET_PLACEHOLDER,
    WORKER_MODEL_NAME,
)
from mlx_agent.worker_contract import contract_argv

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.media_kinds import ModelKind
    from mlx_agent.plan.agent_support import Template
    from mlx_agent.plan.requests import ModelRequest
    from mlx_agent.records.plan import (
        AdapterRecord,
        AgentsRecord,
        DraftRecord,
        FileCheck,
        FrontRecord,
        ModelPlan,
        ModelPolicyRecord,
        Recipe,
        RuntimeRecord,
        SourceRecord,
    )

# Seconds from TERM to KILL of a worker: one that saves its prompt cache on TERM gets longer.
WORKER_STOP_TIMEOUT = 5.0
WORKER_SAVING_STOP_TIMEOUT = 20.0


# Config keys that give a model's context window, in the order mlx_lm's model classes read them.
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


def thinking_args(recipe: Recipe, spec: ModelRequest) -> tuple[str, dict[str, Any], list[str]]:
    """Return the plan's thinking state, the merged chat template args, and the extra server arguments."""
    capabilities = recipe.get("capabilities", {})
    template_args = _template_args(spec.chat_template_args)
    if spec.chat_template_args is not None and not capabilities.get("chat_template_args"):
        raise UnsupportedRuntime(
            f"runtime {recipe['name']} takes no chat template arguments", details={"runtime": recipe["name"]}
        )
    cap = capabilities["thinking"]
    flag = capabilities["chat_template_args"]
    extra: list[str] = []
    state = "default" if spec.thinking is None else spec.thinking
    if spec.thinking is not None:
        if cap is None:
            state = "unsupported"  # the runtime has no switch: it starts unchanged, and the plan says so
        elif cap["kind"] == "chat_template_args":
            template_args = {**template_args, cap["key"]: spec.thinking == "on"}
            flag = cap["flag"]
        else:
            extra = list(cap["on"] if spec.thinking == "on" else cap["off"])
    if template_args and flag is not None:  # a runtime without the flag refused --chat-template-args above
        extra = [*extra, flag, canonical_json(template_args)]
    return state, template_args, extra


def child_env(launcher: str) -> dict[str, str]:
    """Return what a child's environment gets: the offline switches, and our package where it is a checkout."""
    env = dict(OFFLINE_ENV)
    if launcher == "wrapped":
        # From a checkout the package is not installed: point the child at the source tree it was planned from.
        root = checkout_root()
        if root is not None:
            env["PYTHONPATH"] = root
    return env


def _trained(raw: str) -> dict[str, Any]:
    """Return what a completed training receipt vouches for, checked now, with the receipt's own identity."""
    from mlx_agent.plan.training_receipt import check_training_receipt, load_training_receipt

    receipt, receipt_sha = load_training_receipt(raw)
    path = Path(raw).expanduser().absolute()
    checked = check_training_receipt(receipt, path.parent)
    checked["receipt"] = {
        "path": str(path),
        "sha256": receipt_sha,
        "size": path.stat().st_size,
        "id": receipt.get("id"),
    }
    return checked


def _adapter(
    spec: ModelRequest, recipe: Recipe, runtime: RuntimeRecord, trained: dict[str, Any] | None
) -> AdapterRecord | None:
    if spec.adapter_path is None and trained is None:
        return None
    if not recipe.get("capabilities", {}).get("adapter"):
        raise UnsupportedRuntime(
            f"runtime {recipe['name']} cannot serve an adapter", details={"runtime": recipe["name"]}
        )
    if not runtime["adapter_enabled"]:
        raise UnsupportedRuntime(
            "an adapter is served only through mlx-agent's own entry, which rechecks it "
            "before loading; a --runtime-executable from another environment cannot",
            details={"runtime": recipe["name"], "launcher": runtime["launcher"]},
        )
    vlm = recipe["capabilities"].get("adapter_layout") == "mlx_vlm"
    if trained is None:
        return (resolve_vlm_adapter if vlm else resolve_adapter)(spec.adapter_path or "")
    if vlm:  # `lora train` trains with mlx_lm: its adapter is mlx_lm's
        raise UnsupportedRuntime(
            f"a training receipt's adapter is mlx_lm's; runtime {recipe['name']} reads its own adapters",
            details={"runtime": recipe["name"]},
        )
    # The receipt's recorded hashes were just rechecked; the adapter is still validated like any other.
    return {**resolve_adapter(trained["adapter"]["path"]), "training_receipt": trained["receipt"]}


def build_argv(runtime: RuntimeRecord, native_args: list[str]) -> list[str]:
    """Return the exact argv a worker is launched with."""
    if runtime["launcher"] == "wrapped":
        return [runtime["interpreter"] or sys.executable, "-m", runtime["module"], runtime["name"], *native_args]
    if runtime["launcher"] == "module":
        return [runtime["interpreter"] or sys.executable, "-m", runtime["module"], *native_args]
    return [*runtime["argv_prefix"], *native_args]


def without(template: list[str], placeholder: str) -> list[str]:
    """Return an argv template without ``placeholder`` and the flag before it."""
    out: list[str] = []
    for word in template:
        if word == placeholder:
            out = out[:-1]
        else:
            out.append(word)
    return out


def native_template(template: list[str]) -> list[str]:
    """Return a native argv template without its port: the native entry appends ``--port N`` from its environment."""
    return without(template, "{port}")


def worker_max_tokens(spec: ModelRequest, window: int | None) -> int | None:
    """Return the worker's default reply limit: the plan's, else the window (which no reply can pass), else none.

    Without --max-tokens nothing may cut a reply short of what the context leaves: the wrapped entry cuts the
    window's limit to the room the prompt leaves; with no window known the runtime keeps its own default.
    """
    return spec.max_tokens if spec.max_tokens is not None else window


def worker_secret(recipe: Recipe, launcher: str) -> str | None:
    """Return the variable a TCP worker's per-launch key is given in, or None for a worker on a private socket.

    A recipe's ``secret_env`` names the runtime's own key check (mlx_vlm's); ``native_key: "entry"`` says the
    native entry checks it (mlx_lm's server checks none).
    """
    if launcher == "wrapped":
        return None
    if launcher == "native" and recipe.get("native_key") == "entry":
        return KEY_ENV
    secret: str | None = recipe.get("secret_env")
    return secret


def _tensor_bytes(path: Path) -> int:
    _, header = read_safetensors_header(path)
    return sum(int(t["data_offsets"][1]) - int(t["data_offsets"][0]) for k, t in header.items() if k != "__metadata__")


def weight_bytes(source: SourceRecord, adapter: AdapterRecord | None, draft: DraftRecord | None = None) -> int | None:
    """Return the tensor bytes a load brings into memory, read from safetensors headers (None if unknown).

    A draft model's weights load beside the served model's, so they count too.
    """
    sources = [source] if draft is None else [source, draft["source"]]
    weights = [Path(s["path"]) / f["name"] for s in sources for f in s["files"] if f["name"].endswith(".safetensors")]
    if not weights:
        return None
    total = sum(_tensor_bytes(path) for path in weights)
    if adapter is not None:
        tensors = [f["name"] for f in adapter["files"] if f["name"].endswith(".safetensors")]
        total += sum(_tensor_bytes(Path(adapter["path"]) / name) for name in tensors)
    return total


def file_checks(adapter: AdapterRecord | None) -> list[FileCheck]:
    """Return the files every worker load rechecks by content: the adapter's, and the receipt vouching for it."""
    if adapter is None:
        return []
    checks: list[FileCheck] = [
        {"path": str(Path(adapter["path"]) / f["name"]), "sha256": f["sha256"], "size": f["size"]}
        for f in adapter["files"]
    ]
    receipt = adapter.get("training_receipt")
    if receipt is not None:
        checks.append({"path": receipt["path"], "sha256": receipt["sha256"], "size": receipt["size"]})
    return checks


def agents_plan(
    spec: ModelRequest, recipe: Recipe, model: ResolvedModel, window: int | None
) -> tuple[AgentsRecord | None, Template | None]:
    """Return a chat model's ``agents`` record and its template (the worker's contract binds a template file).

    An embedding or media model has none. Only the wrapped mlx_lm worker's parser is predicted (``tool_parser``
    capability).
    """
    check_options(spec, recipe, model.runtime)
    if model_kind(recipe, model.config) not in CHAT_KINDS:
        return None, None
    predicts = bool(recipe.get("capabilities", {}).get("tool_parser")) and model.runtime["launcher"] == "wrapped"
    return agents_record(spec, model.source, model.runtime, predicts_parser=predicts, window=window)


def default_name(source: SourceRecord, trained: dict[str, Any] | None) -> str:
    """Return the name clients use by default: the repo id, or the model directory's name (never a path)."""
    if trained is not None:
        return Path(trained["adapter"]["path"]).name
    return source.get("repo") or Path(source["path"]).name


def model_kind(recipe: Recipe, config: dict[str, Any]) -> ModelKind:
    """Return what the model serves: a recipe's own ``kind`` (embeddings, media), or chat that reads images or not.

    A vision model is one a runtime with the ``vision`` capability (mlx-vlm) serves with a vision tower in its
    config.json (``runtime_select``); such a runtime also serves text-only model types, and one without the
    capability is never given a vision model.
    """
    kind = recipe.get("kind")
    if kind is not None:
        return kind
    return "vision" if recipe["capabilities"].get("vision") and vision_markers(config) else "text"


class ResolvedModel:
    """A model's options with what its files decide first: its source, config and runtime (and so its port)."""

    __slots__ = ("config", "reason", "recipe", "runtime", "source", "spec", "trained")

    def __init__(self, spec: ModelRequest) -> None:
        validate_spec(spec)
        if spec.runtime != AUTO:
            load_recipe(spec.runtime)  # an unknown runtime is refused before any file is read
        trained = _trained(spec.training_receipt) if spec.training_receipt is not None else None
        if trained is not None:
            source, config = trained["base"], trained["base_config"]
        elif spec.path is not None:
            source, config = resolve_path_source(spec.path)
        else:
            source, config = resolve_repo_source(spec.repo or "")
        if spec.verify_weights:
            source = with_digests(source)  # the same record, digests added
        name, self.reason = select_runtime(spec.runtime, config, spec.runtime_executable)
        self.recipe, recipe_sha = load_recipe(name)
        self.runtime = resolve_runtime(name, self.recipe, recipe_sha, spec.runtime_executable)
        self.spec, self.trained, self.source, self.config = spec, trained, source, config

    @property
    def default_port(self) -> int:
        """Return the port of the model's runtime, where a plan names none."""
        return int(self.recipe["default_port"])


def build_model_plan(
    model: ResolvedModel,
    policy: ModelPolicyRecord,
    ready_timeout: float,
    *,
    log_path: Path,
    hostfile_path: Path,
    front: FrontRecord,
    prefix_cache_path: Path,
) -> ModelPlan:
    """Return one model's plan record, its files at the paths given; reads, writes nothing.

    Its wrapped worker reads requests under the ``front``'s body cap and deadlines (its contract).
    """
    spec, trained, source, config = model.spec, model.trained, model.source, model.config
    recipe, runtime, reason, name = model.recipe, model.runtime, model.reason, model.runtime["name"]
    thinking, template_args, extra_args = thinking_args(recipe, spec)
    adapter = _adapter(spec, recipe, runtime, trained)
    if adapter is not None:
        extra_args += ["--adapter-path", adapter["path"]]
    draft = draft_plan(spec, recipe, config)
    kv_cache = kv_cache_plan(spec, recipe)
    concurrency = decode_concurrency_plan(spec, recipe)
    extra_args += decoding_args(draft, kv_cache, concurrency)
    runtime_options = passed_through(spec, recipe)
    extra_args += passed_through_args(runtime_options)
    lookup = accel.prompt_lookup(
        spec.prompt_lookup,
        recipe,
        runtime,
        adapter=adapter is not None,
        draft=draft is not None,
        kv_bits=kv_cache is not None,
    )
    prefill = accel.m5_prefill(spec.m5_prefill, recipe, runtime, config, adapter=adapter is not None)
    asked = {
        "--adapter-path": adapter is not None,
        "--draft-model": draft is not None,
        "--prompt-lookup": spec.prompt_lookup,
        "--m5-prefill": spec.m5_prefill,
        # each rank would read the file on its own host, and sharded loads take no parser: not wired for groups
        "--chat-template": spec.chat_template is not None,
        "--tool-parser": spec.tool_parser is not None,
    }
    group = group_plan(spec, recipe, runtime, source, config, refused=asked, hostfile_path=hostfile_path)
    prompt_cache = None if group is not None else prompt_cache_plan(spec, recipe, runtime)
    extra_args += prompt_cache_args(prompt_cache)
    window = context_window(config)
    agents, chat_template = agents_plan(spec, recipe, model, window)
    reply_limits = reply_limits_plan(spec, recipe, runtime)
    wrapped = runtime["launcher"] == "wrapped"
    cuts = wrapped and bool(recipe.get("cuts_to_context"))
    if wrapped:
        contract = worker_contract(
            front=front,
            file_checks=() if adapter is None else expectations(adapter),
            chat_template=bound_template(None if chat_template is None else chat_template.record),
            model_checks=() if group is None else model_expectations(source),  # each rank checks its own copy
            tool_parser=spec.tool_parser,
            accel=accel.entry_fingerprint(lookup, prefill),
            context_window=window if cuts else None,
            prompt_cache=prompt_cache,
            reply_limits=reply_limits,
        )
        extra_args += contract_argv(contract)
    limit = worker_max_tokens(spec, window)
    values = {
        "model": source["path"],
        "host": HOST,
        "port": PORT_PLACEHOLDER,
        "max_tokens": str(limit),
        "socket": SOCKET_PLACEHOLDER,
    }
    native = runtime["launcher"] == "native"
    template = recipe["wrapper_argv"] if wrapped else native_template(recipe["argv"]) if native else recipe["argv"]
    if limit is None:
        template = without(template, "{max_tokens}")
    native_args = [*(arg.format(**values) for arg in template), *extra_args]
    readiness = recipe.get("native_readiness", recipe["readiness"]) if native else recipe["readiness"]
    if wrapped and SOCKET_FLAG not in native_args:
        raise UnsupportedRuntime(f"the {name} recipe's wrapper_argv lacks {SOCKET_FLAG}")
    prefix_cache = prefix_cache_plan(spec, recipe, prefix_cache_path)
    env = {**child_env(runtime["launcher"]), **prefix_cache_env(recipe, prefix_cache)}
    argv = build_argv(runtime, native_args)
    if group is not None:  # the front's worker is the launcher; its ranks run the entry
        argv = launcher_argv(group, runtime.get("interpreter") or sys.executable, env, argv)
    loaded = weight_bytes(source, adapter, draft)
    if group is not None and loaded is not None:
        loaded //= group["ranks"]  # each rank holds its share (tensor slices, or its run of layers)
    return {
        "served_model_name": spec.served_model_name or default_name(source, trained),
        "alias": list(spec.alias),
        "source": source,
        "requested_runtime": spec.runtime,
        "runtime_reason": reason,
        "runtime": runtime,
        "thinking": thinking,
        "chat_template_args": template_args,
        "adapter": adapter,
        "decode_profile": lookup,  # the seed's --json names for --prompt-lookup and --m5-prefill
        "prefill_kernel": prefill,
        "draft": draft,
        "kv_cache": kv_cache,
        "decode_concurrency": concurrency,
        "prompt_cache": prompt_cache,
        "group": group,
        "max_tokens": spec.max_tokens,
        "max_tokens_ceiling": spec.max_tokens_ceiling,
        "context_window": window,
        "weight_bytes": loaded,
        "file_checks": file_checks(adapter) + template_checks(chat_template),
        "runtime_checks": runtime_checks(runtime),
        "policy": policy,
        "worker": {
            "transport": "unix" if wrapped else "tcp",
            "cuts_to_context": cuts,
            "secret_env": worker_secret(recipe, runtime["launcher"]),
            "port_env": PORT_ENV if native else None,
            "kind": model_kind(recipe, config),
            "model_name": source["path"] if recipe.get("model_field") == "path" else WORKER_MODEL_NAME,
            "argv": argv,
            "executable": reviewed_executable(argv[0]),
            "env": env,
            "cwd": "/",
            "readiness": readiness,
            "ready_timeout": ready_timeout,
            "stop_timeout": WORKER_SAVING_STOP_TIMEOUT if prompt_cache else WORKER_STOP_TIMEOUT,
            "log_path": str(log_path),
        },
        "agents": agents,
        "reply_limits": reply_limits,
        "thinking_budget": runtime_options["thinking_budget"],
        "max_kv_size": runtime_options["max_kv_size"],
        "vision_cache_size": runtime_options["vision_cache_size"],
        "prefix_cache": prefix_cache,
    }
