"""mlx-vlm's speech, transcription and image-generation server, one bound model, on the front's private Unix socket.

The model loads through mlx-vlm's own loader for its kind (``get_cached_model``: ``load_audio_model`` or the
image pipeline's), before the socket listens, and not in mlx-vlm's lifespan, which logs a failed preload and
serves on without the model. What loaded is then checked against the family the model's config files declare
(``media_kinds.detect``, the plan's own rule): mlx-audio falls back to the directory name's parts, and
mlx-vlm's image loader to the name's first token, and a worker that loaded another family than the plan reviewed
stops before it listens.

Then mlx-vlm's app serves, behind three walls: the front's body cap and deadline (``asgi_limits``), the
``kind_wall.KindWall`` (only its kind's paths and ``/health``; ``model`` must be the bound model or absent; a field
that names a server path, another model or a file to write is refused with OpenAI's error shape) and a stand-in
for the package's ``get_cached_model`` (``BoundLoader``) that loads nothing but the bound model, as its kind: a
request can never make mlx-vlm load another model, a Hub id, or unload the bound one. Nothing here sets
``MLX_TRUST_REMOTE_CODE``; the Hub stays offline. ``MEDIA_SEAMS`` names what we rely on in mlx-vlm (checked before
anything loads, and by tests/unit/test_media_seams.py).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlx_agent.errors import SeamChanged, UnsupportedModel, exit_refused
from mlx_agent.media_kinds import IMAGE_GENERATION, SPEECH, TRANSCRIPTION, MediaKind, detect, read_model_config
from mlx_agent.runtime.entries.kind_wall import RULES, KindWall, SchemaCheck
from mlx_agent.runtime.entries.mlx_vlm_server import REMEDIATION, bind_private, check_names, lookup
from mlx_agent.wire import UPLOADS_DIR
from mlx_agent.worker_routes import WorkerRoute

LOADER = "get_cached_model"  # in mlx_vlm.server: every endpoint loads its model through this name (BoundLoader)
AUDIO_LOADER = "load_audio_model"  # in mlx_vlm.server: what LOADER loads an audio model with (DeclaredAudioLoader)
MEDIA_SEAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "mlx_vlm.server.app": {LOADER: ("model_path", "adapter_path"), "load_audio_model": ("model_path",)},
    "mlx_vlm.server.audio": {
        "audio_speech_endpoint": ("payload", "request"),
        "audio_transcriptions_endpoint": ("request",),
        "audio_translations_endpoint": ("request",),
        "_run_tts_request": ("request",),
        "_run_stt_request": ("request",),
    },
    "mlx_vlm.server.openai": {"images_generations_endpoint": ("request",), "images_edits_endpoint": ("request",)},
    # the bodies the image endpoints build unguarded (a ValidationError there is a 500): checked first (SchemaCheck)
    "mlx_vlm.server.schemas": {"ImageGenerationRequest": (), "ImageEditRequest": ()},
    "mlx_vlm.server.runtime": {"ModelCacheRegistry.for_kind": ("self", "kind")},
    # DeclaredAudioLoader: mlx-audio's loader of the kind, given the family and no name parts to guess from
    "mlx_audio.tts.utils": {"load_model": ("model_path", "lazy", "strict")},
    "mlx_audio.stt.utils": {"load_model": ("model_path", "lazy", "strict")},
    "mlx_audio.utils": {"base_load_model": ("model_path", "category", "model_remapping")},
    "uvicorn": {"run": ("app",)},
}
# Functions that must still load their model through LOADER: without the call, the BoundLoader would not stand there.
CALLERS: dict[str, dict[str, tuple[str, ...]]] = {
    "mlx_vlm.server.audio": {"_run_tts_request": (LOADER,), "_run_stt_request": (LOADER,)},
    "mlx_vlm.server.openai": {
        "images_generations_endpoint": (LOADER, "ImageGenerationRequest"),
        "images_edits_endpoint": (LOADER, "ImageEditRequest"),
    },
}
# String constants that must still be read where named: mlx-vlm's loader looks its audio loader up by this name
# (``_server_package_attr``), and mlx-audio's base loader takes the family and the name parts as these keywords.
CONSTANTS: dict[str, dict[str, tuple[str, ...]]] = {
    "mlx_vlm.server.app": {LOADER: (AUDIO_LOADER,)},
    "mlx_audio.utils": {"base_load_model": ("model_type", "model_name_parts")},
}


def check_media_seams() -> None:
    """Raise ``SeamChanged`` naming the first name of mlx-vlm the entry uses that is missing or changed."""
    check_names(MEDIA_SEAMS, CALLERS)
    for module_name, functions in CONSTANTS.items():
        for name, constants in functions.items():
            code = lookup(module_name, name).__code__
            for constant in constants:
                if constant not in code.co_consts:
                    raise SeamChanged(f"{module_name}.{name} no longer reads {constant!r}", remediation=REMEDIATION)
    check_loader_seam()


def check_loader_seam() -> None:
    """Raise ``SeamChanged`` unless the endpoints' loader looks up ``mlx_vlm.server.get_cached_model`` at call time.

    The endpoints call a dependency (``app._protocol_deps``) that reads the package's name on every call; that is
    what lets ``BoundLoader`` stand where every request loads its model. Checked by calling it with the name replaced.
    """
    server: Any = importlib.import_module("mlx_vlm.server")
    through = lookup("mlx_vlm.server.app", f"_protocol_deps.{LOADER}")
    saved, seen = getattr(server, LOADER), object()
    setattr(server, LOADER, lambda *args, **kwargs: seen)
    try:
        reached = through("probe", model_kind="audio_tts") is seen
    except Exception:  # a dependency that loads by itself fails with these arguments
        reached = False
    finally:
        setattr(server, LOADER, saved)
    if not reached:
        raise SeamChanged(
            f"mlx-vlm's endpoints no longer load through mlx_vlm.server.{LOADER}", remediation=REMEDIATION
        )


class BoundLoader:
    """A stand-in for ``mlx_vlm.server.get_cached_model`` that loads only the bound model, only as its kind."""

    def __init__(self, original: Callable[..., Any], model: str, loads: tuple[str, ...]) -> None:
        self.original, self.model, self.loads = original, model, loads

    def __call__(self, model_path: str, adapter_path: Any = None, *, model_kind: str = "auto") -> Any:
        """Return what mlx-vlm's loader returns for the bound model; refuse any other model or kind (404, 400)."""
        from fastapi import HTTPException

        if model_path != self.model:
            raise HTTPException(status_code=404, detail=f"this worker serves only {self.model}")
        if model_kind not in self.loads:
            raise HTTPException(status_code=400, detail=f"this worker does not load models as {model_kind}")
        return self.original(model_path, None, model_kind=model_kind)


class DeclaredAudioLoader:
    """A stand-in for ``mlx_vlm.server.load_audio_model``: mlx-audio's loader of the kind, told the declared family.

    mlx-vlm's own goes through ``mlx_audio.utils.load_model``, which picks TTS or STT and the model module from the
    config and, failing that, from the directory name's parts. This one loads the bound model only, with the family
    the config files declare (``media_kinds.detect``) and no name parts, so a NeMo checkpoint without a model_type
    in a folder called ``whisper-...`` loads as the Parakeet it is.
    """

    def __init__(self, model: str, category: str, family: str) -> None:
        self.model, self.category, self.family = model, category, family

    def __call__(self, model_path: str) -> Any:
        """Return the bound model as mlx-audio's category loader builds it; refuse any other path."""
        if model_path != self.model:
            raise ValueError(f"this worker loads only {self.model}")
        utils: Any = importlib.import_module(f"mlx_audio.{self.category}.utils")
        return utils.load_model(Path(model_path), model_type=self.family, model_name_parts=[])


def image_schema_check() -> SchemaCheck:
    """Return the check of image bodies against the schemas mlx-vlm's image endpoints build from them.

    Those endpoints build ``ImageGenerationRequest(**body)`` outside their error handling, so a value the schema
    refuses (``steps: 0``, ``n: 100``, a prompt that is not a string) would be a 500; it is a 400 here.
    """
    import pydantic

    schemas: Any = importlib.import_module("mlx_vlm.server.schemas")
    models = {
        WorkerRoute.IMAGE_GENERATIONS.path: schemas.ImageGenerationRequest,
        WorkerRoute.IMAGE_EDITS.path: schemas.ImageEditRequest,
    }

    def check(path: str, doc: dict[str, Any]) -> tuple[str, str | None] | None:
        try:
            models[path].model_validate(doc)
        except pydantic.ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first.get("loc", ())) or None
            return f"{where or 'the body'}: {first.get('msg', 'invalid')}", where
        return None

    return check


def loaded_family(kind: MediaKind, model: Any) -> str:
    """Return the family of what mlx-vlm loaded: the mlx-audio module its class lives in, or a pipeline's family."""
    if kind == IMAGE_GENERATION:
        return str(getattr(model, "family", ""))
    module = type(model).__module__
    prefix = RULES[kind].module_prefix
    return module[len(prefix) :].split(".")[0] if module.startswith(prefix) else module


def expected_family(kind: MediaKind, model_dir: Path) -> str:
    """Return the family the model's config files declare for ``kind`` (the plan's rule); refuse when none does."""
    from mlx_agent.installed import media_support

    support = media_support(None)
    found = detect(read_model_config(model_dir), support) if support is not None else []
    match = next((d for d in found if d.kind == kind), None)
    if match is None:
        exit_refused(
            UnsupportedModel(f"{model_dir}'s config files declare no {kind} model the installed mlx-vlm loads")
        )
    return match.family


def load_bound(kind: MediaKind, model: str) -> None:
    """Load the bound model through mlx-vlm's loader and check it is the declared family; refuse it otherwise."""
    app_module: Any = importlib.import_module("mlx_vlm.server.app")
    family = expected_family(kind, Path(model))
    category = RULES[kind].audio
    if category is not None:  # the seam: mlx-vlm's loader looks the audio loader up in the package at call time
        server: Any = importlib.import_module("mlx_vlm.server")
        setattr(server, AUDIO_LOADER, DeclaredAudioLoader(model, category, family))
    try:
        loaded_model, _, _ = app_module.get_cached_model(model, None, model_kind=RULES[kind].loads[0])
    except Exception as exc:  # mlx-vlm's HTTPException carries its reason in ``detail``
        reason = getattr(exc, "detail", None) or f"{type(exc).__name__}: {exc}"
        exit_refused(UnsupportedModel(f"mlx-vlm could not load {model} as {kind}: {reason}"))
    got = loaded_family(kind, loaded_model)
    if got != family:
        exit_refused(
            UnsupportedModel(
                f"mlx-vlm loaded {model} as {got!r}, but its config files declare {family!r} (mlx-audio and mlx-vlm "
                "fall back to the directory's name); rename the directory or serve another model"
            )
        )


def serve_kind(kind: MediaKind, argv: list[str]) -> int:
    """Load the model named by ``--model`` as ``kind`` and serve it on the socket named by ``--mlx-agent-socket``."""
    from mlx_agent.runtime.entries.vlm_environment import clear_cli_settings

    os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"  # before huggingface_hub is imported
    try:
        # mlx_vlm's settings (a preloaded model, a key, trusting remote code) never come from the user's shell.
        clear_cli_settings()
        check_media_seams()
    except SeamChanged as error:
        print(f"mlx-agent: cannot wrap this mlx_vlm: {error}", file=sys.stderr)
        return 2
    from mlx_agent.runtime.entries.contract_entry import started
    from mlx_agent.runtime.serving.asgi_limits import BodyLimits
    from mlx_agent.runtime.serving.socket_limits import from_contract

    given, rest = started(argv, socket=True)
    parser = argparse.ArgumentParser(prog=f"mlx_agent.runtime mlx-vlm {kind}")
    parser.add_argument("--model", required=True)
    args = parser.parse_args(rest)
    socket_path = given.socket or ""
    sock = bind_private(socket_path)  # bound, not listening: a connection succeeds only once the model is loaded
    load_bound(kind, args.model)

    import uvicorn

    server: Any = importlib.import_module("mlx_vlm.server")
    app_module: Any = importlib.import_module("mlx_vlm.server.app")
    setattr(server, LOADER, BoundLoader(app_module.get_cached_model, args.model, RULES[kind].loads))
    # The front stores an edit's checked images beside its workers' sockets (wire.UPLOADS_DIR): the same rule here.
    uploads = (Path(socket_path).parent / UPLOADS_DIR).resolve()
    schema = image_schema_check() if kind == IMAGE_GENERATION else None
    wall = KindWall(app_module.app, kind, args.model, uploads, schema)
    print(f"mlx-agent: serving {kind} with {args.model}", file=sys.stderr)
    try:
        uvicorn.run(BodyLimits(wall, from_contract(given.contract)), fd=sock.fileno(), log_level="warning")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
    return 0


def speech(argv: list[str]) -> int:
    """Run the ``mlx-vlm-speech`` worker."""
    return serve_kind(SPEECH, argv)


def transcription(argv: list[str]) -> int:
    """Run the ``mlx-vlm-transcription`` worker."""
    return serve_kind(TRANSCRIPTION, argv)


def image_generation(argv: list[str]) -> int:
    """Run the ``mlx-vlm-image`` worker."""
    return serve_kind(IMAGE_GENERATION, argv)
