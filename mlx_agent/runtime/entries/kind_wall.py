"""The media worker's wall: ASGI middleware in front of mlx-vlm's app, for one media kind and one bound model.

It answers ``GET /health`` itself (loaded only while mlx-vlm's cache holds the bound model) and passes on only its
kind's paths (``RULES``), with ``model`` absent (written in as the bound model) or the bound model itself, and with
no field that names a server path, another model or a file to write; an edit's image paths must lie inside the
directory the front stores checked uploads in. A JSON body may also be held to the schema its endpoint builds
(``SchemaCheck``). Refusals are in OpenAI's error shape. Nothing here imports mlx or mlx-vlm at load time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_agent.api_errors import Code, Family, error_body
from mlx_agent.media_kinds import IMAGE_GENERATION, SPEECH, TRANSCRIPTION, MediaKind
from mlx_agent.runtime.serving.asgi_limits import App, Message, Receive, Send, read_whole, replaying
from mlx_agent.worker_routes import WorkerRoute

# Checks a JSON body against the schema its endpoint builds: None, or the message and the field at fault.
SchemaCheck = Callable[[str, dict[str, Any]], tuple[str, str | None] | None]

JSON = "application/json"


@dataclass(frozen=True)
class KindRules:
    """What one media kind's worker serves: its paths, what mlx-vlm loads for them, and the fields refused."""

    routes: tuple[WorkerRoute, ...]
    loads: tuple[str, ...]  # mlx-vlm's ``model_kind`` of each load its endpoints ask for (the first is preloaded)
    cache_group: str  # the registry group the preloaded model sits in (mlx-vlm's ``_audio_cache_group``)
    module_prefix: str  # where the loaded model's class must live (the family appended), "" to check ``.family``
    audio: str | None  # mlx-audio's category (``tts``, ``stt``) of an audio kind
    # Fields that name a server path, another model or a file to write: refused whatever their value, except the
    # value each maps to here (a field mlx-vlm defaults to that value is harmless when sent as it).
    refused: dict[str, object]


RULES: dict[MediaKind, KindRules] = {
    SPEECH: KindRules(
        routes=(WorkerRoute.SPEECH,),
        loads=("audio_tts",),
        cache_group="tts",
        module_prefix="mlx_audio.tts.models.",
        audio="tts",
        refused={"ref_audio": None},
    ),
    TRANSCRIPTION: KindRules(
        routes=(WorkerRoute.TRANSCRIPTIONS, WorkerRoute.TRANSLATIONS),
        loads=("audio_stt",),
        cache_group="stt",
        module_prefix="mlx_audio.stt.models.",
        audio="stt",
        refused={},
    ),
    IMAGE_GENERATION: KindRules(
        routes=(WorkerRoute.IMAGE_GENERATIONS, WorkerRoute.IMAGE_EDITS),
        loads=("image_generation", "image_edit"),
        cache_group="image_generation",
        module_prefix="",
        audio=None,
        refused={
            "output_path": None,
            "output_dir": None,
            "prompt_expansion_model": None,
            "upsample_prompt": False,  # on, it loads an upsampler model from the Hub
            "response_format": "b64_json",  # "path" answers with a file the server wrote
        },
    ),
}
IMAGE_PATHS = ("image", "images", "image_paths", "mask")  # an edit's inputs: server paths in mlx-vlm's JSON


def loaded(rules: KindRules, model: str) -> bool:
    """Say whether mlx-vlm's cache holds the bound model in its kind's group."""
    from mlx_vlm.server.runtime import runtime

    cache = runtime.model_cache.for_kind(rules.cache_group)
    return bool(cache) and cache.get("model_path") == model and cache.get("model") is not None


class KindWall:
    """ASGI middleware: one kind's paths and ``/health``, the bound ``model`` only, no server path in a request."""

    def __init__(
        self, app: App, kind: MediaKind, model: str, uploads: Path | None, schema: SchemaCheck | None = None
    ) -> None:
        self.app, self.kind, self.model, self.uploads, self.schema = app, kind, model, uploads, schema
        self.rules = RULES[kind]
        self.paths = {route.path for route in self.rules.routes}

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        """Answer ``/health`` and refusals here; pass a request that is allowed to mlx-vlm's app."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path == "/health" and method == "GET":
            ready = loaded(self.rules, self.model)
            doc = {"status": "ok" if ready else "not_loaded", "model": self.model, "kind": self.kind, "loaded": ready}
            await _reply(send, 200 if ready else 503, doc)
            return
        if path not in self.paths or method != "POST":
            await _refuse(send, Code.UNKNOWN_ENDPOINT, f"no such endpoint on this {self.kind} worker: {path}", None)
            return
        messages, body = await read_whole(receive)
        content_type = dict(scope.get("headers", [])).get(b"content-type", b"").decode("latin-1")
        if content_type.startswith("multipart/form-data"):
            refusal = await self._check_form(scope, body)
        else:
            refusal, rewritten = self._check_json(path, body)
            if rewritten is not None:
                messages = [{"type": "http.request", "body": rewritten, "more_body": False}]
                scope = _with_length(scope, len(rewritten))
        if refusal is not None:
            await _refuse(send, *refusal)
            return
        await self.app(scope, replaying(messages, receive), send)

    def _model_refusal(self, given: object) -> tuple[Code, str, str] | None:
        if given == self.model:
            return None
        return Code.MODEL_NOT_FOUND, f"this worker serves only its bound model, not {given!r}", "model"

    def _check_json(self, path: str, body: bytes) -> tuple[tuple[Code, str, str | None] | None, bytes | None]:
        """Return a refusal of a JSON body, or None and the body rewritten to name the bound model (None: as sent)."""
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            return (Code.INVALID_JSON, "the body is not JSON", None), None
        if not isinstance(doc, dict):
            return (Code.INVALID_BODY, "the body must be a JSON object", None), None
        for field, harmless in self.rules.refused.items():
            if field in doc and doc[field] != harmless:
                why = f"{field!r} names a server path, another model or a file to write; this server never takes one"
                return (Code.UNSUPPORTED_PARAMETER, why, field), None
        refusal = self._image_paths(doc) if self.kind == IMAGE_GENERATION else None
        if refusal is not None:
            return refusal, None
        if "model" in doc:
            refusal = self._model_refusal(doc["model"])
            if refusal is not None:
                return refusal, None
        invalid = self.schema(path, {**doc, "model": self.model}) if self.schema is not None else None
        if invalid is not None:
            return (Code.INVALID_VALUE, *invalid), None
        return None, None if "model" in doc else json.dumps({**doc, "model": self.model}).encode()

    def _image_paths(self, doc: dict[str, Any]) -> tuple[Code, str, str] | None:
        """Refuse an edit's image path outside the directory the front stores checked uploads in (none: every one)."""
        for field in IMAGE_PATHS:
            if field not in doc:
                continue
            values = doc[field] if isinstance(doc[field], list) else [doc[field]]
            for value in values:
                if not isinstance(value, str) or not self._uploaded(value):
                    return (
                        Code.UNSUPPORTED_PARAMETER,
                        f"{field!r} must name an image the server stored itself; send the image as data to the server",
                        field,
                    )
        return None

    def _uploaded(self, value: str) -> bool:
        if self.uploads is None:
            return False
        resolved = Path(value).resolve()
        return resolved.is_relative_to(self.uploads) and resolved.is_file()

    async def _check_form(self, scope: MutableMapping[str, Any], body: bytes) -> tuple[Code, str, str | None] | None:
        """Refuse a multipart form that names another model (or none), parsed by starlette as mlx-vlm parses it."""
        from starlette.requests import Request

        sent = [{"type": "http.request", "body": body, "more_body": False}]

        async def once() -> Message:
            return sent.pop(0) if sent else {"type": "http.disconnect"}

        try:
            form = await Request(scope, once).form()
        except Exception as exc:  # a malformed form: what starlette could not read
            return Code.INVALID_BODY, f"the multipart form does not parse: {exc}", None
        model = form.get("model")
        if model is None:
            return Code.MISSING_PARAMETER, "'model' is required", "model"
        return self._model_refusal(model)


def _with_length(scope: MutableMapping[str, Any], length: int) -> MutableMapping[str, Any]:
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
    return {**scope, "headers": [*headers, (b"content-length", str(length).encode())]}


async def _reply(send: Send, status: int, doc: dict[str, Any]) -> None:
    raw = json.dumps(doc).encode()
    headers = [(b"content-type", JSON.encode()), (b"content-length", str(len(raw)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


async def _refuse(send: Send, code: Code, message: str, param: str | None) -> None:
    await _reply(send, code.status, error_body(Family.OPENAI, code, message, param=param))
