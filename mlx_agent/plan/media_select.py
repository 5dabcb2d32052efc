"""Which media runtime serves a speech, transcription or image-generation model, from its config files alone.

The kinds and their rules are ``media_kinds``'s; this module weighs them against the chat runtimes and the
recipes. ``auto`` serves a checkpoint as media only where its config says nothing a chat runtime loads: a plain
``llama``/``qwen3`` config (an Orpheus-style TTS LM too), ``glm`` or ``mimo`` (also ASR models) stays chat, and
serving it as media takes ``--runtime`` naming the media recipe. A config that is two media kinds at once
(``vibevoice``) takes ``--runtime`` as well. A family whose loading fetches another repository from the Hub is
refused at preview with what it would fetch (serving never downloads, and a cached copy would be a file no plan
bound): binding such extra repositories by hash is not done yet.
"""

from __future__ import annotations

from typing import Any

from mlx_agent.errors import UnsupportedModel
from mlx_agent.errors.commands import RuntimeModelMismatch, UnsupportedRuntime
from mlx_agent.installed import media_support
from mlx_agent.media_kinds import MEDIA_KINDS, Detected, MediaKind, audio_model_type, detect, hub_fetch
from mlx_agent.plan.recipes import load_recipe, recipe_names
from mlx_agent.plan.runtime import runtime_site_paths

HUB_REMEDIATION = (
    "Serve a model of a family that loads from its own files: mlx-agent never downloads, and a repository it "
    "fetches at load would be served unreviewed."
)


def media_runtime(kind: MediaKind) -> str:
    """Return the name of the recipe that serves a media kind."""
    return next(name for name in recipe_names() if load_recipe(name)[0].get("kind") == kind)


def media_kind_of(runtime: str) -> MediaKind | None:
    """Return the media kind a runtime's recipe serves, or None for a chat or embedding runtime."""
    kind = load_recipe(runtime)[0].get("kind")
    return next((k for k in MEDIA_KINDS if k == kind), None)


def _detected(config: dict[str, Any], runtime: str, executable: str | None) -> list[Detected] | None:
    support = media_support(runtime_site_paths(runtime, executable))
    return None if support is None else detect(config, support)


def _refuse_fetching(found: Detected) -> None:
    fetched = hub_fetch(found)
    if fetched is not None:
        raise UnsupportedModel(
            f"{found.family} models fetch {fetched} from the Hugging Face Hub when they load; mlx-agent serves only "
            "what the plan binds from local files",
            details={"kind": found.kind, "family": found.family, "fetches": fetched},
            remediation=HUB_REMEDIATION,
        )


def select_media(runtime: str, kind: MediaKind, config: dict[str, Any], executable: str | None) -> tuple[str, str]:
    """Return a named media runtime and the reason, refusing a config that is not of its kind."""
    from mlx_agent.plan.runtime_install import not_installed

    if executable is not None:  # the wall around mlx_vlm's app is ours: the worker runs in this environment
        raise UnsupportedRuntime(
            f"--runtime {runtime} runs wrapped in this environment only; drop --runtime-executable",
            details={"runtime": runtime, "executable": executable},
        )
    found = _detected(config, runtime, executable)
    if found is None:
        raise not_installed(runtime, executable, f"--runtime {runtime} was asked for")
    match = next((d for d in found if d.kind == kind), None)
    if match is None:
        declared = audio_model_type(config) or config.get("_class_name")
        raise RuntimeModelMismatch(
            f"the model's config files declare no {kind.replace('_', ' ')} model the installed mlx-vlm and "
            f"mlx-audio load (it declares {declared!r}); {runtime} cannot serve it",
            details={"runtime": runtime, "declared": declared, "kinds": [d.kind for d in found]},
            remediation="Use --runtime auto, or the runtime of the model's own kind (`mlx-agent models` shows it).",
        )
    _refuse_fetching(match)
    return runtime, f"requested; {match.why} as {match.family}"


def auto_media(config: dict[str, Any], chat_type: bool) -> tuple[str, str] | None:
    """Return the media runtime ``auto`` picks and why, None for a model that is not (only) media; or refuse.

    ``chat_type``: a chat runtime loads the config's ``model_type``; unless a distinctive key made it an audio type
    (TADA's ``acoustic_dim``), the checkpoint stays chat.
    """
    raw = config.get("model_type")
    if chat_type and isinstance(raw, str) and audio_model_type(config) == raw.lower():
        return None  # decided before the media packages' files are read: most previews are of chat models
    found = _detected(config, media_runtime(MEDIA_KINDS[0]), None)
    if not found:
        return None
    if len(found) > 1:
        names = [media_runtime(d.kind) for d in found]
        raise UnsupportedModel(
            f"config.json's model type {found[0].declared!r} is both a {' and a '.join(d.kind for d in found)} model; "
            "the config alone cannot say which",
            details={"declared": found[0].declared, "kinds": [d.kind for d in found], "runtimes": names},
            remediation=f"Name the runtime of the model's kind: --runtime {' or --runtime '.join(names)}.",
        )
    _refuse_fetching(found[0])
    chosen = media_runtime(found[0].kind)
    return chosen, f"auto: {found[0].why} as {found[0].family} ({found[0].kind})"
