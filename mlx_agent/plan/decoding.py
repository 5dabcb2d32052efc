"""A runtime's own decoding options in a plan: a draft model, KV-cache quantization, a prompt cache kept on disk.

Each is the runtime's own flag, refused for a runtime whose recipe lacks its capability (``_refuse_unless``).
mlx-vlm's take more: a drafter's family, half-bit TurboQuant KV caches and its scheme, and the options of
``PASSED_THROUGH`` (a thinking budget, a rotating KV cache's size, the vision feature cache's size), and its
automatic prefix cache (``prefix_cache_plan``), which it reads only from its environment.

A draft model is bound exactly like the served model (its files' identity, digests under ``--verify-weights``)
and rechecked before every load; its weights count in the load's memory estimate. mlx_lm serves requests
with either option one at a time (its batch generator takes neither), and prompt lookup gives way to both.
"""

from __future__ import annotations

from pathlib import Path

from mlx_agent.errors import DraftModelMismatch
from mlx_agent.errors.commands import UnsupportedRuntime
from mlx_agent.identity import with_digests
from mlx_agent.plan.requests import DEFAULT_KV_GROUP_SIZE
from mlx_agent.plan.source import REPO_ID, resolve_path_source, resolve_repo_source
from mlx_agent.wire import PROMPT_CACHE_FLAG, PROMPT_CACHE_PLACEHOLDER

PROMPT_CACHE_DIR = "prompt-cache"  # under $MLX_AGENT_HOME: one 0700 directory per model identity

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from mlx_agent.plan.requests import ModelRequest
    from mlx_agent.records.plan import (
        DraftRecord,
        KvCacheRecord,
        PrefixCacheRecord,
        PromptCacheRecord,
        Recipe,
        SourceRecord,
    )


def _vocab_size(config: dict[str, Any]) -> int | None:
    text = config.get("text_config")
    for doc in (config, text if isinstance(text, dict) else {}):
        value = doc.get("vocab_size")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


# Options given to the runtime's flag of the same name, each under the recipe's capability of its name.
PASSED_THROUGH = ("thinking_budget", "max_kv_size", "vision_cache_size")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _refuse_unless(recipe: Recipe, capability: str, option: str) -> None:
    capabilities = recipe.get("capabilities", {})
    # A recipe that says nothing of --num-draft-tokens takes it with its draft model (mlx_lm's).
    default = capabilities.get("draft_model") if capability == "num_draft_tokens" else None
    if not capabilities.get(capability, default):
        raise UnsupportedRuntime(
            f"runtime {recipe['name']} does not take {option}",
            details={"runtime": recipe["name"], "option": option},
        )


def draft_plan(spec: ModelRequest, recipe: Recipe, config: dict[str, Any]) -> DraftRecord | None:
    """Return the plan's ``draft``: the draft model's bound identity, or None without ``--draft-model``."""
    if spec.draft_model is None:
        return None
    _refuse_unless(recipe, "draft_model", "--draft-model")
    raw = spec.draft_model
    local = Path(raw).expanduser()
    if local.is_absolute() or local.exists() or not REPO_ID.match(raw):
        source, draft_config = resolve_path_source(raw)
    else:
        source, draft_config = resolve_repo_source(raw)
    if spec.verify_weights:
        source = with_digests(source)
    served, drafting = _vocab_size(config), _vocab_size(draft_config)
    if served is not None and drafting is not None and served != drafting:
        raise DraftModelMismatch(
            f"the draft model's vocabulary has {drafting} tokens and the served model's {served}: its drafts "
            "would be other tokens",
            details={"draft_model": source["path"], "draft_vocab_size": drafting, "vocab_size": served},
        )
    if spec.num_draft_tokens is not None:  # mlx-vlm's drafters take a block size of their own instead
        _refuse_unless(recipe, "num_draft_tokens", "--num-draft-tokens")
    typed: SourceRecord = source  # type: ignore[assignment]  # resolve_*_source build this record
    record: DraftRecord = {"source": typed, "num_draft_tokens": spec.num_draft_tokens}
    if spec.draft_kind is not None:
        _refuse_unless(recipe, "draft_kind", "--draft-kind")
        record["draft_kind"] = spec.draft_kind  # type: ignore[typeddict-item]  # one of DRAFT_KINDS (validate_spec)
    return record


def kv_cache_plan(spec: ModelRequest, recipe: Recipe) -> KvCacheRecord | None:
    """Return the plan's ``kv_cache``: its quantization bits and group size, or None for full precision."""
    if spec.kv_bits is None:
        return None
    _refuse_unless(recipe, "kv_bits", "--kv-bits")
    whole = float(spec.kv_bits).is_integer()
    bits = int(spec.kv_bits) if whole else spec.kv_bits  # a whole width is written as mlx_lm's int flag takes it
    # Bounds checked in validate_spec (a whole width is one of mx.quantize's); without --kv-group-size, the
    # runtime's own default (64), recorded.
    record: dict[str, Any] = {"kv_bits": bits, "kv_group_size": spec.kv_group_size or DEFAULT_KV_GROUP_SIZE}
    if not whole or spec.kv_quant_scheme is not None:
        _refuse_unless(recipe, "kv_quant_scheme", "--kv-quant-scheme" if whole else f"--kv-bits {spec.kv_bits}")
    if recipe.get("capabilities", {}).get("kv_quant_scheme"):
        # A half width is TurboQuant's whatever the scheme says (mlx_vlm's turboquant_enabled): recorded as such.
        record["kv_quant_scheme"] = "turboquant" if not whole else spec.kv_quant_scheme or "uniform"
    return record  # type: ignore[return-value]


def passed_through(spec: ModelRequest, recipe: Recipe) -> dict[str, int | None]:
    """Return the plan's value of each option of ``PASSED_THROUGH`` (None: not given); refused without capability."""
    values: dict[str, int | None] = {name: getattr(spec, name) for name in PASSED_THROUGH}
    for name, value in values.items():
        if value is not None:
            _refuse_unless(recipe, name, _flag(name))
    return values


def passed_through_args(values: Mapping[str, int | None]) -> list[str]:
    """Return the runtime's flags of the options of ``PASSED_THROUGH`` that the plan gives."""
    given = [(name, values.get(name)) for name in PASSED_THROUGH]
    return [word for name, value in given if value is not None for word in (_flag(name), str(value))]


def decode_concurrency_plan(spec: ModelRequest, recipe: Recipe) -> int | None:
    """Return the plan's ``decode_concurrency`` (None: the runtime's own, the recipe's ``batch_slots``)."""
    if spec.decode_concurrency is None:
        return None
    _refuse_unless(recipe, "batch_slots", "--decode-concurrency")
    return spec.decode_concurrency


def decoding_args(
    draft: DraftRecord | None, kv_cache: KvCacheRecord | None, decode_concurrency: int | None = None
) -> list[str]:
    """Return mlx_lm's flags for the draft model, the KV-cache quantization and the decode concurrency."""
    args: list[str] = [] if decode_concurrency is None else ["--decode-concurrency", str(decode_concurrency)]
    if draft is not None:
        args += ["--draft-model", draft["source"]["path"]]
        if draft["num_draft_tokens"] is not None:
            args += ["--num-draft-tokens", str(draft["num_draft_tokens"])]
        if "draft_kind" in draft:
            args += ["--draft-kind", draft["draft_kind"]]
    if kv_cache is not None:
        args += ["--kv-bits", str(kv_cache["kv_bits"]), "--kv-group-size", str(kv_cache["kv_group_size"])]
        if "kv_quant_scheme" in kv_cache:
            args += ["--kv-quant-scheme", kv_cache["kv_quant_scheme"]]
    return args


def prompt_cache_plan(spec: ModelRequest, recipe: Recipe, runtime: Mapping[str, Any]) -> PromptCacheRecord | None:
    """Return where the worker keeps its prompt cache across unloads, or None (another runtime, or 0 GB).

    The directory of a model is named at each spawn by ``kept_cache.cache_identity`` (its bound files, draft,
    worker argv and runtime), so a changed model never restores another's entries.
    """
    if not recipe.get("keeps_prompt_cache") or runtime.get("launcher") != "wrapped" or spec.prompt_cache_disk_gb <= 0:
        return None
    from mlx_agent.home import agent_home

    return {"root": str(agent_home() / PROMPT_CACHE_DIR), "disk_gb": spec.prompt_cache_disk_gb}


def prompt_cache_args(record: PromptCacheRecord | None) -> list[str]:
    """Return the wrapped entry's flag for keeping the prompt cache, its directory filled in by the front at each load.

    Its disk limit is the contract's (``prompt_cache_disk_gb``).
    """
    if record is None:
        return []
    return [PROMPT_CACHE_FLAG, PROMPT_CACHE_PLACEHOLDER]


# mlx-vlm's automatic prefix cache (mlx_vlm/apc.py ``from_env``): its pool's defaults, written into the plan so
# the reviewed figures are the ones it runs with, and the environment variables it reads them from.
APC_BLOCK_SIZE = 16
APC_NUM_BLOCKS = 2048


def prefix_cache_plan(spec: ModelRequest, recipe: Recipe, disk_path: Path) -> PrefixCacheRecord | None:
    """Return the plan's ``prefix_cache`` (mlx-vlm's APC), or None without ``--prefix-cache-gb``.

    Its disk copy lives in ``disk_path``, beside the server's receipt (``PortFiles.prefix_cache``), never in
    mlx-vlm's default ``~/.cache/mlx-vlm/apc`` shared by every server of the user; 0 GB keeps it in memory only.
    """
    if spec.prefix_cache_gb is None:
        return None
    _refuse_unless(recipe, "prefix_cache", "--prefix-cache-gb")
    gb = float(spec.prefix_cache_gb)
    return {
        "block_size": APC_BLOCK_SIZE,
        "num_blocks": APC_NUM_BLOCKS,
        "disk_path": str(disk_path) if gb > 0 else None,
        "disk_max_gb": gb,
    }


def prefix_cache_env(recipe: Recipe, record: PrefixCacheRecord | None) -> dict[str, str]:
    """Return the APC environment of a worker of ``recipe``: on as ``record`` says, else explicitly off.

    A runtime that has the cache gets ``APC_ENABLED`` either way, so an ``APC_ENABLED=1`` in the user's own
    environment never turns an unreviewed cache on. No default tenant: the front names the tenant of every
    request (``X-APC-Tenant``, gateway/cache_tenant.py), so a request without one never shares another's.
    """
    if not recipe.get("capabilities", {}).get("prefix_cache"):
        return {}
    if record is None:
        return {"APC_ENABLED": "0"}
    disk = record["disk_path"]
    return {
        "APC_ENABLED": "1",
        "APC_BLOCK_SIZE": str(record["block_size"]),
        "APC_NUM_BLOCKS": str(record["num_blocks"]),
        "APC_DISK_ENABLED": "1" if disk is not None else "0",
        "APC_DISK_PATH": disk or "",
        "APC_DISK_MAX_GB": repr(record["disk_max_gb"]),
        "APC_DEFAULT_TENANT": "",
    }
