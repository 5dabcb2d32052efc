"""The support file of the two accelerations and the rules read from it, for the plan and the entry alike.

``runtime/accel/kernels/support.json`` says which dependency versions prompt lookup was tested with and what the
M5 Q4 prefill kernel needs (system, GPU, model shape). The plan checks these rules at preview
(``plan/accel.py``) and the wrapped entry checks the same functions again inside the server
(``runtime/entries/accel_entry.py``), so each rule is written once.
"""

from __future__ import annotations

import json

from mlx_agent.files import sha256_file
from mlx_agent.installed import dist_version, own_site_paths
from mlx_agent.resources import PACKAGE_DIR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

KERNELS_DIR = PACKAGE_DIR / "runtime" / "accel" / "kernels"
SUPPORT_FILE = KERNELS_DIR / "support.json"
SUPPORT_NAME = "runtime/accel/kernels/support.json"
LOOKUP_SOURCES = ("runtime/accel/prompt_lookup.py", "runtime/accel/lookup_serving.py")
PREFILL_SOURCES = ("runtime/accel/m5_prefill.py", "runtime/accel/kernels/m5_q4_prefill.metal")
LOOKUP_DEPENDENCIES = ("mlx", "mlx-lm")
PREFILL_DEPENDENCIES = ("mlx", "mlx-metal", "mlx-lm")


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


def lookup_version_reasons(versions: dict[str, str | None], rules: dict[str, Any]) -> list[str]:
    """Return why these dependency versions rule out prompt lookup (its rules name tested minor versions)."""
    return [
        f"{dep} {versions.get(dep)} is not a tested version ({', '.join(rules[dep])})"
        for dep in LOOKUP_DEPENDENCIES
        if _minor(versions.get(dep)) not in rules[dep]
    ]


def prefill_platform_reasons(
    platform: str, macos: str | None, versions: dict[str, str | None], rules: dict[str, Any]
) -> list[str]:
    """Return why this system and these dependency versions (minor versions, as pinned) rule out the M5 kernel."""
    reasons = []
    if platform != "darwin" or macos is None:
        reasons.append(f"needs macOS {rules['macos_min']}+ with Metal; this is {platform}")
    elif not _at_least(macos, rules["macos_min"]):
        reasons.append(f"macOS {macos} is older than {rules['macos_min']}")
    for dep in PREFILL_DEPENDENCIES:
        if _minor(versions.get(dep)) not in rules[dep]:
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
        have = f"{quant.get('bits')}-bit with group size {quant.get('group_size')}" if quant else "not quantized"
        reasons.append(f"weights are {have}, not {rules['bits']}-bit with group size {rules['group_size']}")
    if quant.get("mode", "affine") != rules["mode"]:
        reasons.append(f"quantization mode is not {rules['mode']}")
    for key in ("hidden_size", "intermediate_size"):
        value = config.get(key)
        if not isinstance(value, int) or value % rules["dims_multiple"]:
            reasons.append(f"{key} {value} is not divisible by {rules['dims_multiple']}")
    if str(config.get("torch_dtype", "float16")) not in ("float16", "fp16"):
        reasons.append(f"activations are {config.get('torch_dtype')}, not float16")
    return reasons
