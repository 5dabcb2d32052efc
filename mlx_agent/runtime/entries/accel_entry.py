"""The entry's side of ``--prompt-lookup`` and ``--m5-prefill``: flags, fingerprint, eligibility, application.

The plan (``plan/accel.py``) gives the entry ``prompt_lookup`` and/or ``m5_prefill`` in the worker's contract,
with their fingerprint: the dependency versions (``mlx``, ``mlx-lm``[, ``mlx-metal``]) and the sha256 of each
bundled source and the support file. ``accel_flags`` reads them from the contract; ``refuse_if_changed``
compares the fingerprint with what is
installed and exits with one ``mlx-agent-error`` line (``runtime_changed``) if anything differs, before any
model loads. After the model has loaded, ``prepare`` rechecks eligibility with the same rules as the plan,
applies the kernel (logging how many layers it adapted, 0 where it does not apply) and returns the prompt
lookup settings, or None for native generation.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import Any

from mlx_agent import accel_rules
from mlx_agent.errors import RuntimeChanged, exit_refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.worker_contract import WorkerContract

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AccelFlags:
    """What the plan asked of the entry: which options, and the fingerprint they were reviewed with."""

    prompt_lookup: bool = False
    m5_prefill: bool = False
    versions: dict[str, str | None] = field(default_factory=dict)
    sources: dict[str, str | None] = field(default_factory=dict)

    @property
    def requested(self) -> bool:
        """Whether either acceleration was asked for."""
        return self.prompt_lookup or self.m5_prefill


def accel_flags(contract: WorkerContract) -> AccelFlags:
    """Return what the contract asks of the accelerations, with the fingerprint they were reviewed with."""
    return AccelFlags(contract.prompt_lookup, contract.m5_prefill, dict(contract.versions), dict(contract.sources))


def fingerprint_changes(flags: AccelFlags) -> list[dict[str, Any]]:
    """Return one record per dependency version or bundled file that differs from the plan's fingerprint."""
    changes: list[dict[str, Any]] = []
    installed = accel_rules.installed_versions(tuple(flags.versions))
    for dep, expected in sorted(flags.versions.items()):
        if installed[dep] != expected:
            changes.append({"field": f"versions.{dep}", "expected": expected, "actual": installed[dep]})
    actual = accel_rules.sources(tuple(flags.sources))
    for name, expected in sorted(flags.sources.items()):
        if actual[name] != expected:
            changes.append({"field": f"sources.{name}", "expected": expected, "actual": actual[name]})
    return changes


def refuse_if_changed(flags: AccelFlags) -> None:
    """Exit the process with a ``runtime_changed`` report if the plan's fingerprint no longer holds."""
    changes = fingerprint_changes(flags)
    if not changes:
        return
    exit_refused(
        RuntimeChanged(
            "the dependencies or bundled sources of --prompt-lookup/--m5-prefill changed since "
            "the plan was reviewed; not loading",
            details={"changes": changes},
        )
    )


def _gpu_architecture() -> str | None:
    import mlx.core as mx

    if not mx.metal.is_available():
        return None
    info = mx.device_info() if hasattr(mx, "device_info") else mx.metal.device_info()
    value = info.get("architecture")
    return value if isinstance(value, str) else None


def prompt_lookup_settings(provider: Any, rules: dict[str, Any]) -> Any:
    """Return the prompt-lookup settings for the loaded model, or None (logged) when it keeps native generation."""
    from mlx_agent.runtime.accel.lookup_serving import PromptLookup, model_ready

    reasons = accel_rules.lookup_version_reasons(accel_rules.installed_versions(accel_rules.LOOKUP_DEPENDENCIES), rules)
    if provider.cli_args.adapter_path is not None:
        reasons.append("an adapter is served, and adapters keep native generation")
    if provider.draft_model is not None:
        reasons.append("a draft model is served, and draft models keep native generation")
    why = model_ready(provider.model)
    if why is not None:
        reasons.append(why)
    if reasons:
        log.info("mlx-agent: prompt lookup is off (%s); every request keeps native generation", "; ".join(reasons))
        return None
    settings = PromptLookup(max_draft=int(rules["max_draft_tokens"]), window=int(rules["lookup_window"]))
    log.info(
        "mlx-agent: prompt lookup is on: plain greedy requests draft up to %d tokens from the last %d prompt "
        "tokens and the reply, one request at a time",
        settings.max_draft,
        settings.window,
    )
    return settings


def apply_prefill_kernel(provider: Any, rules: dict[str, Any]) -> int:
    """Adapt the loaded model's eligible layers to the M5 kernel; log and return how many were adapted."""
    reasons = accel_rules.prefill_platform_reasons(
        sys.platform,
        accel_rules.macos_version(),
        accel_rules.installed_versions(accel_rules.PREFILL_DEPENDENCIES),
        rules,
    )
    if not reasons:
        reasons += accel_rules.gpu_reasons(_gpu_architecture(), rules)
    if provider.cli_args.adapter_path is not None:
        reasons.append("LoRA adapters are excluded")
    if reasons:
        log.info("mlx-agent: M5 prefill kernel not eligible (%s); native MLX; adapted 0 layers", "; ".join(reasons))
        return 0
    from mlx_agent.runtime.accel.m5_prefill import adapt_model

    result = adapt_model(provider.model, min_rows=int(rules["min_rows"]), model_types=list(rules["model_types"]))
    detail = f" (left alone: {'; '.join(result.reasons)})" if result.reasons else ""
    log.info("mlx-agent: M5 prefill kernel: adapted %d layers%s", result.adapted, detail)
    return result.adapted


def prepare(provider: Any, flags: AccelFlags) -> Any:
    """Apply what was asked to the loaded model; return the prompt-lookup settings or None."""
    if not flags.requested:
        return None
    rules, _ = accel_rules.support()
    if flags.m5_prefill:
        apply_prefill_kernel(provider, rules["m5_prefill"])
    return prompt_lookup_settings(provider, rules["prompt_lookup"]) if flags.prompt_lookup else None
