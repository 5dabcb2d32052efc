"""The two accelerations of the wrapped entry, as the plan records them.

They are prompt-lookup decoding (``decode_profile``) and the M5 Q4 prefill kernel (``prefill_kernel``).

Both are checked here at preview against ``runtime/kernels/support.json`` and checked again inside the
server (``runtime/accel_entry.py``, with the same rules from this module). Neither is an error when it cannot
apply: the plan says why, and the server runs native MLX. The M5 kernel needs Metal, so on this kind of
machine it is always recorded as not eligible.

The plan passes its fingerprint to the entry: ``--mlx-agent-expect-versions mlx=...,mlx-lm=...`` (the
dependency versions it recorded) and one ``--mlx-agent-expect-source NAME=SHA256`` per bundled source (and the
support file). The entry refuses to start (``runtime_changed``) when what is installed differs.
"""

from __future__ import annotations

import json
import sys

from mlx_agent.errors import UnsupportedRuntime
from mlx_agent.plan.identity import sha256_file
from mlx_agent.plan.installed import dist_version, own_site_paths
from mlx_agent.plan.recipes import PACKAGE_DIR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

KERNELS_DIR = PACKAGE_DIR / "runtime" / "kernels"
SUPPORT_FILE = KERNELS_DIR / "support.json"
SUPPORT_NAME = "runtime/kernels/support.json"
DECODE_SOURCES = ("runtime/prompt_lookup.py", "runtime/lookup_serving.py")
PREFILL_SOURCES = ("runtime/m5_prefill.py", "runtime/kernels/m5_q4_prefill.metal")
PROMPT_LOOKUP_FLAG = "--mlx-agent-prompt-lookup"
M5_PREFILL_FLAG = "--mlx-agent-m5-prefill"
VERSIONS_FLAG = "--mlx-agent-expect-versions"
SOURCE_FLAG = "--mlx-agent-expect-source"
LOOKUP_DEPENDENCIES = ("mlx", "mlx-lm")
PREFILL_DEPENDENCIES = ("mlx", "mlx-metal", "mlx-lm")
FOREIGN = "a runtime from another environment keeps its exact native argv"


def sources(names: tuple[str, ...]) -> dict[str, str | None]:
    """Return the sha256 of each bundled file (None where it is missing), keyed by its package-relative name."""
    return {name: sha256_file(PACKAGE_DIR / name) if (PACKAGE_DIR / name).is_file() else None for name in names}


def support() -> tuple[dict[str, Any], str]:
    """Return the support file's rules and its sha256."""
    raw = SUPPORT_FILE.read_bytes()
    return json.loads(raw), sha256_file(SUPPORT_FILE)


def installed_versions(dependencies: tuple[str, ...]) -> dict[str, str | None]:
    """Return this interpreter's installed version of each dependency (None where absent)."""
    paths = own_site_paths()
    return {dep: dist_version(dep, paths) for dep in dependencies}


def _minor(version: str | None) -> str | None:
    return ".".join(version.split(".")[:2]) if version else None


def macos_version() -> str | None:
    """Return this Mac's macOS version, or None elsewhere."""
    import platform

    release = platform.mac_ver()[0]
    return release or None


def _at_least(version: str, minimum: str) -> bool:
    def parts(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split(".") if p.isdigit())

    return parts(version) >= parts(minimum)


def _gpu_architecture(interpreter: str) -> str | None:
    """Ask MLX in a child process which GPU it sees (the CLI itself never imports mlx)."""
    import subprocess

    probe = ("import mlx.core as mx; info = mx.device_info() if hasattr(mx, 'device_info') "
             "else mx.metal.device_info(); print(info.get('architecture', ''))")
    try:
        out = subprocess.run([interpreter, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):  # no answer is no eligibility
        return None
    return out.stdout.strip() or None


def lookup_version_reasons(versions: dict[str, str | None], rules: dict[str, Any]) -> list[str]:
    """Return why these dependency versions rule out prompt lookup (its rules name tested minor versions)."""
    return [f"{dep} {versions.get(dep)} is not a tested version ({', '.join(rules[dep])})"
            for dep in LOOKUP_DEPENDENCIES if _minor(versions.get(dep)) not in rules[dep]]


def prefill_platform_reasons(platform: str, macos: str | None, versions: dict[str, str | None],
                             rules: dict[str, Any]) -> list[str]:
    """Return why this system and these exact dependency versions rule out the M5 kernel."""
    reasons = []
    if platform != "darwin" or macos is None:
        reasons.append(f"needs macOS {rules['macos_min']}+ with Metal; this is {platform}")
    elif not _at_least(macos, rules["macos_min"]):
        reasons.append(f"macOS {macos} is older than {rules['macos_min']}")
    for dep in PREFILL_DEPENDENCIES:
        if versions.get(dep) not in rules[dep]:
            reasons.append(f"{dep} {versions.get(dep)} is not a supported version ({', '.join(rules[dep])})")
    return reasons


def gpu_reasons(gpu: str | None, rules: dict[str, Any]) -> list[str]:
    """Return why a GPU architecture rules out the M5 kernel."""
    if gpu in rules["gpu_architectures"]:
        return []
    return [f"GPU architecture {gpu} is not {', '.join(rules['gpu_architectures'])}"]


def model_shape_reasons(config: dict[str, Any], rules: dict[str, Any]) -> list[str]:
    """Return why a model's config does not fit the M5 kernel (empty when it does)."""
    reasons = []
    if config.get("model_type") not in rules["model_types"]:
        reasons.append(f"model_type {config.get('model_type')!r} is not one of {rules['model_types']}")
    quant = config.get("quantization") or config.get("quantization_config") or {}
    if quant.get("bits") != rules["bits"] or quant.get("group_size") != rules["group_size"]:
        reasons.append(f"weights are not {rules['bits']}-bit with group size {rules['group_size']}")
    if quant.get("mode", "affine") != rules["mode"]:
        reasons.append(f"quantization mode is not {rules['mode']}")
    for key in ("hidden_size", "intermediate_size"):
        value = config.get(key)
        if not isinstance(value, int) or value % rules["dims_multiple"]:
            reasons.append(f"{key} {value} is not divisible by {rules['dims_multiple']}")
    if str(config.get("torch_dtype", "float16")) not in ("float16", "fp16"):
        reasons.append(f"activations are {config.get('torch_dtype')}, not float16")
    return reasons


def _check_runtime(recipe: dict[str, Any], option: str, kernel: str) -> None:
    if kernel not in recipe.get("capabilities", {}).get("kernels", []):
        raise UnsupportedRuntime(f"{option} is an mlx_lm option; runtime {recipe['name']} rejects it",
                                 details={"runtime": recipe["name"], "option": option})


def decode_profile(requested: bool, recipe: dict[str, Any], runtime: dict[str, Any], *,
                   adapter: bool = False) -> dict[str, Any]:
    """Return the plan's ``decode_profile``: prompt lookup as requested and whether it will apply."""
    if not requested:
        return {"requested": "native", "applied": False, "reasons": []}
    _check_runtime(recipe, "--prompt-lookup", "prompt_lookup")
    rules_all, support_sha = support()
    rules = rules_all["prompt_lookup"]
    versions = installed_versions(LOOKUP_DEPENDENCIES)
    reasons = []
    if runtime["launcher"] != "wrapped":
        reasons.append(FOREIGN)
    reasons += lookup_version_reasons(versions, rules)
    if adapter:
        reasons.append("an adapter is served, and adapters keep native generation")
    return {"requested": "prompt_lookup", "applied": not reasons, "reasons": reasons,
            "max_draft_tokens": rules["max_draft_tokens"], "lookup_window": rules["lookup_window"],
            "versions": versions, "support_sha256": support_sha, "sources": sources(DECODE_SOURCES)}


def prefill_kernel(requested: bool, recipe: dict[str, Any], runtime: dict[str, Any], config: dict[str, Any], *,
                   adapter: bool = False) -> dict[str, Any]:
    """Return the plan's ``prefill_kernel``: the M5 Q4 profile as requested and whether it is eligible."""
    if not requested:
        return {"requested": "native", "eligible": False, "reasons": []}
    _check_runtime(recipe, "--m5-prefill", "m5_prefill")
    rules_all, support_sha = support()
    rules = rules_all["m5_prefill"]
    versions = installed_versions(PREFILL_DEPENDENCIES)
    reasons = []
    if runtime["launcher"] != "wrapped":
        reasons.append(FOREIGN)
    macos = macos_version()
    reasons += prefill_platform_reasons(sys.platform, macos, versions, rules)
    reasons += model_shape_reasons(config, rules)
    if adapter:
        reasons.append("LoRA adapters are excluded")
    gpu = None
    if not reasons:  # only a fully matching Mac is worth starting MLX for
        gpu = _gpu_architecture(runtime["interpreter"])
        reasons += gpu_reasons(gpu, rules)
    return {"requested": "m5_q4", "eligible": not reasons, "reasons": reasons, "gpu_architecture": gpu,
            "macos": macos, "versions": versions, "min_rows": rules["min_rows"], "support_sha256": support_sha,
            "sources": sources(PREFILL_SOURCES)}


def entry_flags(decode: dict[str, Any], prefill: dict[str, Any], runtime: dict[str, Any]) -> list[str]:
    """Return the wrapped entry's flags: lookup when it applies, the kernel whenever asked, and the fingerprint.

    The entry rechecks the kernel's eligibility itself and logs how many layers it adapted (zero where it
    does not apply). The fingerprint is what the plan recorded of what the enabled options run on.
    """
    if runtime["launcher"] != "wrapped":
        return []
    lookup = bool(decode["applied"])
    kernel = prefill["requested"] != "native"
    if not (lookup or kernel):
        return []
    versions: dict[str, str | None] = {}
    files: dict[str, str | None] = {}
    for record, used in ((decode, lookup), (prefill, kernel)):
        if used:
            versions.update(record["versions"])
            files.update(record["sources"])
            files[SUPPORT_NAME] = record["support_sha256"]
    flags = [PROMPT_LOOKUP_FLAG] if lookup else []
    flags += [M5_PREFILL_FLAG] if kernel else []
    flags += [VERSIONS_FLAG, ",".join(f"{dep}={versions[dep] or ''}" for dep in sorted(versions))]
    for name in sorted(files):
        flags += [SOURCE_FLAG, f"{name}={files[name] or ''}"]
    return flags
