"""Which runtime serves a model: ``--runtime auto`` from config.json, and the checks of an explicit choice.

Only the local config.json is read, and the runtimes' supported model types come from their installed
files; no code from the model repository or the runtimes is imported. mlx-vlm is an extra (``mlx-agent[vlm]``):
a plan that needs it where it is absent is refused with the command that installs it there. An embedding model
is served by ``mlx-vlm-embed`` when asked for by name (``auto`` serves chat: an embedding checkpoint such as
Qwen3-Embedding says what it is only in its sentence-transformers files, not in config.json).
"""

from __future__ import annotations

from mlx_agent.errors import UnsupportedModel
from mlx_agent.errors.commands import RuntimeModelMismatch, UnsupportedRuntime
from mlx_agent.installed import embedding_support, model_support
from mlx_agent.model_config import vision_markers
from mlx_agent.plan.runtime import runtime_site_paths
from mlx_agent.plan.runtime_install import install_hint, not_installed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.records.plan import Recipe

MLX_LM = "mlx_lm"
MLX_VLM = "mlx-vlm"
# What ``auto`` tries, in order: a vision model goes to the first with the ``vision`` capability, a text model to
# the first whose package has its model type. An embedding runtime is served only when asked for by name.
AUTO_ORDER = (MLX_LM, MLX_VLM)


# Keys whose non-null presence marks a checkpoint with a vision tower, as mlx_vlm's model configs use them.
def supported_module(runtime: str, model_type: str, executable: str | None) -> str | None:
    """Return the module name a runtime would load for ``model_type``, or None if it has none (or is absent)."""
    return _module(_support(runtime, executable), model_type)


def _recipe(runtime: str) -> Recipe:
    from mlx_agent.plan.recipes import load_recipe

    return load_recipe(runtime)[0]


def _support(runtime: str, executable: str | None) -> tuple[set[str], dict[str, str]] | None:
    return model_support(_recipe(runtime)["package"], runtime_site_paths(runtime, executable))


def _module(support: tuple[set[str], dict[str, str]] | None, model_type: str) -> str | None:
    if support is None:
        return None
    types, remapping = support
    normalised = remapping.get(model_type, model_type)
    return normalised if normalised in types else None


def select_runtime(requested: str, config: dict[str, Any], executable: str | None) -> tuple[str, str]:
    """Return the runtime that serves this config and the reason, refusing an impossible combination.

    A speech, transcription or image-generation model is weighed first (``media_select``): its config need not
    name a model_type (a NeMo checkpoint, a diffusers pipeline's ``model_index.json``).
    """
    from mlx_agent.plan.media_select import auto_media, media_kind_of, select_media

    if requested != "auto" and (kind := media_kind_of(requested)) is not None:
        return select_media(requested, kind, config, executable)
    raw_type = config.get("model_type")
    if requested == "auto":
        chat_type = isinstance(raw_type, str) and any(
            supported_module(name, raw_type.lower(), None) for name in AUTO_ORDER
        )
        media = auto_media(config, chat_type)
        if media is not None:
            return media
    if not isinstance(raw_type, str) or not raw_type:
        raise UnsupportedModel("config.json names no model_type", details={"model_type": raw_type})
    model_type = raw_type.lower()
    markers = vision_markers(config)
    if requested == "auto":
        return _auto(raw_type, model_type, markers)
    recipe = _recipe(requested)
    embeds = recipe.get("kind") == "embedding"
    if markers and not embeds and not recipe["capabilities"].get("vision"):
        raise RuntimeModelMismatch(
            f"{raw_type} is a vision model ({', '.join(markers)} in config.json); {requested} cannot serve it",
            details={"model_type": raw_type, "vision_markers": markers},
        )
    if embeds:
        if executable is not None:  # mlx_vlm's own server takes no token ids and ignores ``dimensions``
            raise UnsupportedRuntime(
                f"--runtime {requested} runs wrapped in this environment only; drop --runtime-executable",
                details={"runtime": requested, "executable": executable},
            )
        embedders = embedding_support(runtime_site_paths(requested, executable))
        if embedders is None:
            raise not_installed(requested, executable, f"--runtime {requested} was asked for")
        if model_type not in embedders:
            raise UnsupportedModel(
                f"mlx-vlm's embedding loader has no embedding model class for model_type {raw_type!r}",
                details={"model_type": raw_type, "runtime": requested, "supported": sorted(embedders)},
            )
        return requested, f"requested; mlx-vlm's embedding loader loads model_type {raw_type}"
    support = _support(requested, executable)
    if support is None:
        raise not_installed(requested, executable, f"--runtime {requested} was asked for")
    module = _module(support, model_type)
    if module is None:
        raise UnsupportedModel(
            f"{requested} has no model class for model_type {raw_type!r}",
            details={"model_type": raw_type, "runtime": requested},
        )
    return requested, f"requested; {requested} loads model_type {raw_type} as {module}"


def _auto(raw_type: str, model_type: str, markers: list[str]) -> tuple[str, str]:
    """Return the runtime ``auto`` picks for a model (``AUTO_ORDER``) and the reason, or refuse it."""
    if markers:
        vision = next(name for name in AUTO_ORDER if _recipe(name)["capabilities"].get("vision"))
        support = _support(vision, None)
        if support is None:
            raise not_installed(vision, None, f"config.json has {', '.join(markers)}: a vision model needs {vision}")
        module = _module(support, model_type)
        if module is None:
            raise UnsupportedModel(
                f"vision model_type {raw_type!r} is not supported by the installed {vision}",
                details={"model_type": raw_type, "vision_markers": markers},
            )
        return vision, f"auto: config.json has {', '.join(markers)}; {vision} loads {raw_type} as {module}"
    for runtime in AUTO_ORDER:
        module = supported_module(runtime, model_type, None)
        if module is not None:
            return runtime, f"auto: text model; {runtime} loads model_type {raw_type} as {module}"
    if _support(MLX_VLM, None) is None:  # mlx-vlm might load it: say how to find out
        command, _ = install_hint(MLX_VLM, None)
        raise UnsupportedModel(
            f"mlx_lm does not support model_type {raw_type!r}, and mlx-vlm (which has other model types) is not "
            "installed",
            details={"model_type": raw_type, "install_command": command},
            remediation=f"Serve a model whose model_type mlx_lm supports, or install mlx-vlm and retry: {command}.",
        )
    raise UnsupportedModel(
        f"neither mlx_lm nor mlx-vlm supports model_type {raw_type!r}", details={"model_type": raw_type}
    )
