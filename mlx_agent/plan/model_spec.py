"""The checks of one model's options against each other, and the policy its record and the mode give it.

The record itself is ``plan.requests.ModelRequest``: ``serve start``'s per-model options, or one ``[[model]]``
table of a models file (``models_file``), declared once. Cheap to import.
"""

from __future__ import annotations

from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import TrustRemoteCodeRefused
from mlx_agent.plan.options import problem
from mlx_agent.plan.recipes import AUTO

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.plan.requests import ModelRequest
    from mlx_agent.records.plan import ModelPolicyRecord


def validate_spec(spec: ModelRequest) -> None:
    """Refuse a model's options that are out of their bounds or contradict each other, before any file is read."""
    for opt in spec.OPTIONS:
        value = getattr(spec, opt.dest)
        wrong = problem(opt, value)
        if wrong is not None:
            raise InvalidArguments(f"{opt.flag} {wrong}", details={opt.dest: value})
    if spec.training_receipt is not None:
        if spec.path is not None or spec.repo is not None or spec.adapter_path is not None:
            raise InvalidArguments(
                "--training-receipt selects the base model and adapter itself; "
                "do not combine it with --path, --repo or --adapter-path"
            )
    elif (spec.path is None) == (spec.repo is None):
        raise InvalidArguments("give exactly one of --path or --repo (or --training-receipt)")
    ceiling = spec.max_tokens_ceiling
    if ceiling is not None and spec.max_tokens is not None and ceiling < spec.max_tokens:
        raise InvalidArguments(
            "--max-tokens-ceiling must be at least --max-tokens",
            details={"max_tokens": spec.max_tokens, "max_tokens_ceiling": ceiling},
        )
    if spec.runtime == AUTO and spec.runtime_executable is not None:
        raise InvalidArguments("--runtime-executable needs an explicit --runtime naming what it provides")
    if spec.served_model_name is not None and not spec.served_model_name.strip():
        raise InvalidArguments("--served-model-name must not be empty")
    for pattern in spec.alias:
        if not pattern.strip():
            raise InvalidArguments("--alias must not be empty")
    if spec.num_draft_tokens is not None and spec.draft_model is None:
        raise InvalidArguments("--num-draft-tokens needs --draft-model")
    if spec.kv_group_size is not None and spec.kv_bits is None:
        raise InvalidArguments("--kv-group-size needs --kv-bits", details={"kv_group_size": spec.kv_group_size})
    _check_vlm_options(spec)


def _check_vlm_options(spec: ModelRequest) -> None:
    """Refuse mlx-vlm's start-up options that contradict each other (each runtime's capability is the plan's)."""
    if spec.trust_remote_code:
        raise TrustRemoteCodeRefused(
            "--trust-remote-code would make the worker import and run Python code from the model's folder, "
            "which no plan reviews or binds",
            details={"option": "--trust-remote-code"},
        )
    if spec.kv_quant_scheme is not None and spec.kv_bits is None:
        raise InvalidArguments("--kv-quant-scheme needs --kv-bits", details={"kv_quant_scheme": spec.kv_quant_scheme})
    if spec.kv_bits is not None and not float(spec.kv_bits).is_integer() and spec.kv_quant_scheme == "uniform":
        raise InvalidArguments(
            f"--kv-bits {spec.kv_bits} is TurboQuant's: uniform quantization takes whole bits",
            details={"kv_bits": spec.kv_bits, "kv_quant_scheme": spec.kv_quant_scheme},
        )
    if spec.max_kv_size is not None and spec.kv_bits is not None:
        # mlx-vlm keeps a quantized cache whole: it would drop the rotating cache and say so only in its log.
        raise InvalidArguments(
            "--max-kv-size and --kv-bits: mlx-vlm ignores the rotating cache under a quantized KV cache; give one",
            details={"max_kv_size": spec.max_kv_size, "kv_bits": spec.kv_bits},
        )
    if spec.draft_kind is not None and spec.draft_model is None:
        raise InvalidArguments("--draft-kind needs --draft-model", details={"draft_kind": spec.draft_kind})
    if spec.thinking_budget is not None and spec.draft_model is not None:
        # mlx-vlm's server refuses every request with a thinking budget under speculative decoding.
        raise InvalidArguments(
            "--thinking-budget and --draft-model: mlx-vlm applies no thinking budget while a draft model drafts",
            details={"thinking_budget": spec.thinking_budget, "draft_model": spec.draft_model},
        )


def model_policy(spec: ModelRequest, *, jit: bool) -> ModelPolicyRecord:
    """Return the model's policy: an eager front loads every model and keeps it; with --jit the record decides.

    What an eager front cannot honour (an idle timeout, keep_loaded or preload false) is refused before this.
    """
    return {
        "idle_timeout": (spec.idle_timeout or 0) if jit else 0,
        "keep_loaded": bool(spec.keep_loaded) or not jit,
        "preload": bool(spec.preload) or not jit,
    }
