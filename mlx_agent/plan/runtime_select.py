"""Which runtime serves a model: ``--runtime auto`` from config.json, and the checks of an explicit choice.

Only the local config.json is read, and the runtimes' supported model types come from their installed
files; no code from the model repository or the runtimes is imported.
"""

from __future__ import annotations

from mlx_agent.errors import RuntimeModelMismatch, UnsupportedModel
from mlx_agent.installed import model_support
from mlx_agent.plan.runtime import runtime_site_paths

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MLX_LM = "mlx_lm"
MLX_VLM = "mlx-vlm"
PACKAGES = {MLX_LM: "mlx_lm", MLX_VLM: "mlx_vlm"}
# Keys whose non-null presence marks a checkpoint with a vision tower, as mlx_vlm's model configs use them.
VISION_MARKERS = ("vision_config", "vision_tower", "mm_vision_tower", "visual", "image_token_index", "image_token_id")


def vision_markers(config: dict[str, Any]) -> list[str]:
    """Return the vision markers present (non-null) in a config."""
    return [key for key in VISION_MARKERS if config.get(key) is not None]


def supported_module(runtime: str, model_type: str, executable: str | None) -> str | None:
    """Return the module name a runtime would load for ``model_type``, or None if it has none."""
    support = model_support(PACKAGES[runtime], runtime_site_paths(runtime, executable))
    if support is None:
        return None
    types, remapping = support
    normalised = remapping.get(model_type, model_type)
    return normalised if normalised in types else None


def select_runtime(requested: str, config: dict[str, Any], executable: str | None) -> tuple[str, str]:
    """Return the runtime that serves this config and the reason, refusing an impossible combination."""
    raw_type = config.get("model_type")
    if not isinstance(raw_type, str) or not raw_type:
        raise UnsupportedModel("config.json names no model_type", details={"model_type": raw_type})
    model_type = raw_type.lower()
    markers = vision_markers(config)
    if requested == MLX_LM and markers:
        raise RuntimeModelMismatch(
            f"{raw_type} is a vision model ({', '.join(markers)} in config.json); mlx_lm cannot serve it",
            details={"model_type": raw_type, "vision_markers": markers},
        )
    if requested in PACKAGES:
        module = supported_module(requested, model_type, executable)
        if module is None:
            raise UnsupportedModel(
                f"{requested} has no model class for model_type {raw_type!r}",
                details={"model_type": raw_type, "runtime": requested},
            )
        return requested, f"requested; {requested} loads model_type {raw_type} as {module}"
    if requested != "auto":
        return requested, "requested"
    if markers:
        module = supported_module(MLX_VLM, model_type, None)
        if module is None:
            raise UnsupportedModel(
                f"vision model_type {raw_type!r} is not supported by the installed mlx-vlm",
                details={"model_type": raw_type, "vision_markers": markers},
            )
        return MLX_VLM, f"auto: config.json has {', '.join(markers)}; mlx-vlm loads {raw_type} as {module}"
    for runtime in (MLX_LM, MLX_VLM):
        module = supported_module(runtime, model_type, None)
        if module is not None:
            return runtime, f"auto: text model; {runtime} loads model_type {raw_type} as {module}"
    raise UnsupportedModel(
        f"neither mlx_lm nor mlx-vlm supports model_type {raw_type!r}", details={"model_type": raw_type}
    )
