"""mlx_lm's own decoding options in a plan: a draft model for speculative decoding, and KV-cache quantization.

A draft model is bound exactly like the served model (its files' identity, digests under ``--verify-weights``)
and rechecked before every load; its weights count in the load's memory estimate. mlx_lm serves requests
with either option one at a time (its batch generator takes neither), and prompt lookup gives way to both.
"""

from __future__ import annotations

from pathlib import Path

from mlx_agent.errors import DraftModelMismatch, UnsupportedRuntime
from mlx_agent.plan.identity import with_digests
from mlx_agent.plan.source import REPO_ID, resolve_path_source, resolve_repo_source

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.plan.model_plan import ModelSpec
    from mlx_agent.records import DraftRecord, KvCacheRecord, SourceRecord


def _vocab_size(config: dict[str, Any]) -> int | None:
    text = config.get("text_config")
    for doc in (config, text if isinstance(text, dict) else {}):
        value = doc.get("vocab_size")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _refuse_unless(recipe: dict[str, Any], capability: str, option: str) -> None:
    if not recipe.get("capabilities", {}).get(capability):
        raise UnsupportedRuntime(
            f"{option} is an mlx_lm option; runtime {recipe['name']} rejects it",
            details={"runtime": recipe["name"], "option": option},
        )


def draft_plan(spec: ModelSpec, recipe: dict[str, Any], config: dict[str, Any]) -> DraftRecord | None:
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
    typed: SourceRecord = source  # type: ignore[assignment]  # resolve_*_source build this record
    return {"source": typed, "num_draft_tokens": spec.num_draft_tokens}


def kv_cache_plan(spec: ModelSpec, recipe: dict[str, Any]) -> KvCacheRecord | None:
    """Return the plan's ``kv_cache``: its quantization bits and group size, or None for full precision."""
    if spec.kv_bits is None:
        return None
    _refuse_unless(recipe, "kv_bits", "--kv-bits")
    record = {"bits": spec.kv_bits, "group_size": spec.kv_group_size or 64}  # both checked in validate_spec
    return record  # type: ignore[return-value]


def decoding_args(draft: DraftRecord | None, kv_cache: KvCacheRecord | None) -> list[str]:
    """Return mlx_lm's flags for the draft model and the KV-cache quantization."""
    args: list[str] = []
    if draft is not None:
        args += ["--draft-model", draft["source"]["path"]]
        if draft["num_draft_tokens"] is not None:
            args += ["--num-draft-tokens", str(draft["num_draft_tokens"])]
    if kv_cache is not None:
        args += ["--kv-bits", str(kv_cache["bits"]), "--kv-group-size", str(kv_cache["group_size"])]
    return args
