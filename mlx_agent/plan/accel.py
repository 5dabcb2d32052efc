"""The two accelerations of the wrapped entry, as the plan records them.

They are prompt-lookup decoding (``--prompt-lookup``, recorded as ``decode_profile``) and the M5 Q4 prefill
kernel (``--m5-prefill``, recorded as ``prefill_kernel``): the plan's and receipt's names are the spec's
``--json`` contract, the functions here and the entry's rules are named after the options.

Both are checked here at preview against ``runtime/accel/kernels/support.json`` and checked again inside the
server (``runtime/entries/accel_entry.py``, with the same rules from this module). Neither is an error when it cannot
apply: the plan says why, and the server runs native MLX. The M5 kernel needs Metal, so on this kind of
machine it is always recorded as not eligible.

The plan passes its fingerprint to the entry in the worker's contract (``entry_fingerprint``): the dependency
versions it recorded and the sha256 of each bundled source (and of the support file). The entry refuses to start
(``runtime_changed``) when what is installed differs.
"""

from __future__ import annotations

import sys

from mlx_agent.accel_rules import (
    LOOKUP_DEPENDENCIES,
    LOOKUP_SOURCES,
    PREFILL_DEPENDENCIES,
    PREFILL_SOURCES,
    SUPPORT_NAME,
    gpu_reasons,
    installed_versions,
    lookup_version_reasons,
    macos_version,
    model_shape_reasons,
    prefill_platform_reasons,
    sources,
    support,
)
from mlx_agent.errors.commands import UnsupportedRuntime

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.records.plan import M5PrefillRecord, PromptLookupRecord, Recipe, RuntimeRecord

FOREIGN = "a runtime from another environment keeps its exact native argv"


def _gpu_architecture(interpreter: str) -> str | None:
    """Ask MLX in a child process which GPU it sees (the CLI itself never imports mlx)."""
    import subprocess

    probe = (
        "import mlx.core as mx; info = mx.device_info() if hasattr(mx, 'device_info') "
        "else mx.metal.device_info(); print(info.get('architecture', ''))"
    )
    try:
        out = subprocess.run([interpreter, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):  # no answer is no eligibility
        return None
    return out.stdout.strip() or None


def _rules(recipe: Recipe, runtime: RuntimeRecord, option: str, name: str) -> tuple[dict[str, Any], str, list[str]]:
    """Refuse ``option`` on a runtime without it; return its rules, the support file's sha256, and first reasons."""
    if name not in recipe.get("capabilities", {}).get("kernels", []):
        raise UnsupportedRuntime(
            f"{option} is an mlx_lm option; runtime {recipe['name']} rejects it",
            details={"runtime": recipe["name"], "option": option},
        )
    rules_all, support_sha = support()
    return rules_all[name], support_sha, [FOREIGN] if runtime["launcher"] != "wrapped" else []


def prompt_lookup(
    requested: bool,
    recipe: Recipe,
    runtime: RuntimeRecord,
    *,
    adapter: bool = False,
    draft: bool = False,
    kv_bits: bool = False,
) -> PromptLookupRecord:
    """Return the plan's ``decode_profile``: whether it was asked for and whether it will apply."""
    if not requested:
        return {"requested": False, "applied": False, "reasons": []}
    rules, support_sha, reasons = _rules(recipe, runtime, "--prompt-lookup", "prompt_lookup")
    versions = installed_versions(LOOKUP_DEPENDENCIES)
    reasons += lookup_version_reasons(versions, rules)
    if adapter:
        reasons.append("an adapter is served, and adapters keep native generation")
    if draft:
        reasons.append("a draft model is served: mlx_lm's own speculative decoding drafts instead")
    if kv_bits:
        reasons.append("the KV cache is quantized (--kv-bits), which the lookup decoder does not verify against")
    return {
        "requested": True,
        "applied": not reasons,
        "reasons": reasons,
        "max_draft_tokens": rules["max_draft_tokens"],
        "lookup_window": rules["lookup_window"],
        "versions": versions,
        "support_sha256": support_sha,
        "sources": sources(LOOKUP_SOURCES),
    }


def m5_prefill(
    requested: bool, recipe: Recipe, runtime: RuntimeRecord, config: dict[str, Any], *, adapter: bool = False
) -> M5PrefillRecord:
    """Return the plan's ``prefill_kernel``: whether the M5 Q4 kernel was asked for and whether it is eligible."""
    if not requested:
        return {"requested": False, "eligible": False, "reasons": []}
    rules, support_sha, reasons = _rules(recipe, runtime, "--m5-prefill", "m5_prefill")
    versions = installed_versions(PREFILL_DEPENDENCIES)
    macos = macos_version()
    reasons += prefill_platform_reasons(sys.platform, macos, versions, rules)
    reasons += model_shape_reasons(config, rules)
    if adapter:
        reasons.append("LoRA adapters are excluded")
    gpu = None
    if not reasons:  # only a fully matching Mac is worth starting MLX for
        gpu = _gpu_architecture(runtime.get("interpreter") or sys.executable)
        reasons += gpu_reasons(gpu, rules)
    return {
        "requested": True,
        "eligible": not reasons,
        "reasons": reasons,
        "gpu_architecture": gpu,
        "macos": macos,
        "versions": versions,
        "min_rows": rules["min_rows"],
        "support_sha256": support_sha,
        "sources": sources(PREFILL_SOURCES),
    }


def entry_fingerprint(
    lookup: PromptLookupRecord, prefill: M5PrefillRecord
) -> tuple[bool, bool, dict[str, str | None], dict[str, str | None]]:
    """Return the contract's part: lookup when it applies, the kernel whenever asked, and their fingerprint.

    The fingerprint is the dependency versions and source digests of what the enabled ones run on. The entry
    rechecks the kernel's eligibility itself and logs how many layers it adapted (zero where it does not apply).
    """
    use_lookup = lookup["applied"]
    use_kernel = prefill["requested"]
    versions: dict[str, str | None] = {}
    files: dict[str, str | None] = {}
    for record, used in ((lookup, use_lookup), (prefill, use_kernel)):
        if used:
            versions.update(record.get("versions") or {})
            files.update(record.get("sources") or {})
            files[SUPPORT_NAME] = record.get("support_sha256")
    return use_lookup, use_kernel, versions, files
