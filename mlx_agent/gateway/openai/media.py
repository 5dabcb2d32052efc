"""mlx-vlm's media endpoints through the front: speech, transcriptions and translations, image generations and edits.

Each is answered only by a model of its kind (``model_kinds.require_kind``: 400 ``model_not_speech``,
``model_not_transcription``, ``model_not_image_generation``), on the road of every model request
(``Upstream.worker_request``: routing by ``model``, load on demand, queue and admission, the request line).
The worker gets its one model's name, never the client's, and only fields this module wrote.

* ``POST /v1/audio/speech`` (JSON, ``media_bodies.SpeechBody``): the worker's audio bytes are passed through with
  their content type (``PASSED_TYPES``), whole or, with ``stream: true``, as they come. ``wav`` (the default
  here: mlx-audio writes it without ffmpeg) and ``pcm`` are always written; ``mp3``, ``flac`` and ``opus`` only
  where ffmpeg is found, else 400 ``audio_format_unsupported``; ``aac`` never.
* ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` (forms, ``multipart``): the upload is decoded
  and re-encoded by the front (``audio_check``) and sent on as a form holding that WAV; the reply (JSON or text,
  by ``response_format``) is passed through.
* ``POST /v1/images/generations`` (JSON): the worker's images come back as ``b64_json`` only; any path the
  worker names is dropped.
* ``POST /v1/images/edits`` (a form, as the openai SDK sends it): each image is checked as a chat image is
  (``images.check_image``, whole), written by the front into a directory of its own for this request under the
  front's private socket directory (``uploads_dir``), and the worker is sent JSON naming those files (mlx-vlm
  reads edits' images from paths); the directory is removed when the reply is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.audio_check import MAX_AUDIO_BYTES, check_audio
from mlx_agent.gateway.door.http_errors import json_response, parse, refused
from mlx_agent.gateway.images import LIMITS, check_image
from mlx_agent.gateway.model_kinds import require_kind
from mlx_agent.gateway.models.lifecycle import Lifecycle
from mlx_agent.gateway.models.worker import WorkerProcess
from mlx_agent.gateway.models.worker_stream import WorkerReply
from mlx_agent.gateway.multipart import FormSpec, Upload, encode_form, read_form, reader_of
from mlx_agent.gateway.observe.request_log import exchange_of
from mlx_agent.gateway.openai.media_bodies import (
    FFMPEG_FORMATS,
    ImageEditForm,
    ImageGenerationBody,
    SpeechBody,
    TranscriptionForm,
    TranslationForm,
    ffmpeg_found,
)
from mlx_agent.gateway.upstream import Raw, Upstream, read_error
from mlx_agent.wire import UPLOADS_DIR
from mlx_agent.worker_routes import WorkerRoute

log = logging.getLogger("mlx_agent.gateway")
# The content types a media reply is passed through with; anything else from a worker is 502 worker_failed.
PASSED_TYPES = ("application/json", "text/plain", "application/x-ndjson")
QUEUED_PIECES = 16  # pieces of a streamed reply held for a slow client before the worker is paused
MAX_EDIT_IMAGES = 16
FORM_ROOM = 1024 * 1024  # an audio form's text fields and framing, beside its file
IMAGE_FIELDS = frozenset({"model", "prompt", "n", "size", "steps", "seed", "guidance", "response_format"})


def upload_caps(max_body_bytes: int) -> dict[str, int]:
    """Return the body caps of the audio endpoints, which take OpenAI's 25 MB file whatever the JSON body cap.

    The door (``security.Guard``) holds every other path to ``max_body_bytes`` (16 MiB by default).
    """
    cap = max(max_body_bytes, MAX_AUDIO_BYTES + FORM_ROOM)
    return {WorkerRoute.TRANSCRIPTIONS.path: cap, WorkerRoute.TRANSLATIONS.path: cap}


def audio_form(max_body_bytes: int) -> FormSpec:
    """Return the audio endpoints' form: one ``file`` within ``MAX_AUDIO_BYTES``, the form within its cap."""
    return FormSpec(
        fields=frozenset({"model", "language", "prompt", "temperature", "response_format", "stream"}),
        files=frozenset({"file"}),
        max_files=1,
        max_file_bytes=MAX_AUDIO_BYTES,
        max_total_bytes=upload_caps(max_body_bytes)[WorkerRoute.TRANSCRIPTIONS.path],
        too_large=Code.AUDIO_TOO_LARGE,
        what="audio file",
    )


def edit_form(max_body_bytes: int) -> FormSpec:
    """Return the edit endpoint's form: up to ``MAX_EDIT_IMAGES`` ``image`` files, each within a chat image's cap."""
    return FormSpec(
        fields=IMAGE_FIELDS | {"output_format", "user"},
        files=frozenset({"image"}),
        max_files=MAX_EDIT_IMAGES,
        max_file_bytes=min(LIMITS.max_bytes, max_body_bytes),
        max_total_bytes=max_body_bytes,
        too_large=Code.IMAGE_TOO_LARGE,
        what="image",
    )


def passed_type(reply: WorkerReply) -> str:
    """Return the reply's content type when it may be passed to the client; 502 ``worker_failed`` otherwise."""
    kind = reply.content_type
    if kind.startswith("audio/") or kind in PASSED_TYPES:
        return reply.headers.get("content-type", kind)
    raise refused(Code.WORKER_FAILED, f"the model worker answered with content of type {kind or 'none'}")


async def error_of(upstream: Upstream, model: Lifecycle, worker: WorkerProcess, reply: WorkerReply) -> RequestRefused:
    """Return the refusal carrying a worker's error reply."""
    raw = await upstream.read_body(model, worker, reply)
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    return read_error(reply.status, doc)


async def pass_through(request: web.Request, reply: WorkerReply, content_type: str) -> web.StreamResponse:
    """Send the worker's reply to the client as it comes (a slow client pauses the worker's reads)."""
    response = web.StreamResponse(status=200, headers={"Content-Type": content_type})
    await response.prepare(request)
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    def sink(piece: bytes) -> None:
        queue.put_nowait(piece)
        if queue.qsize() > QUEUED_PIECES:
            reply.pause()

    piping = asyncio.ensure_future(reply.pipe(sink))
    piping.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (piece := await queue.get()) is not None:
            await response.write(piece)
            if queue.qsize() <= QUEUED_PIECES // 2:
                reply.resume()
        how = await piping
    finally:
        piping.cancel()
    if how is not None:
        # The head is out, and audio has no error event: the connection is cut without the body's end, so the
        # client sees the reply broke off rather than a whole file.
        log.warning("a streamed media reply broke off: %s", how)
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response


def _fields(body: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    return {name: body[name] for name in names if body.get(name) is not None}


class MediaApi:
    """The handlers of the media endpoints (the module docstring); ``socket_dir`` holds edits' uploads."""

    def __init__(self, upstream: Upstream, socket_dir: Path, max_body_bytes: int) -> None:
        self.upstream = upstream
        self.socket_dir = socket_dir
        self.audio_form = audio_form(max_body_bytes)
        self.edit_form = edit_form(max_body_bytes)
        # What a front that died mid-edit left: the socket directory is this front's alone.
        shutil.rmtree(socket_dir / UPLOADS_DIR, ignore_errors=True)

    async def _answer(
        self,
        request: web.Request,
        model: Lifecycle,
        body: dict[str, Any],
        route: WorkerRoute,
        *,
        stream: bool = False,
        raw: Raw | None = None,
    ) -> web.StreamResponse:
        """Send a media request; pass its reply through (streamed when ``stream``)."""
        async with self.upstream.worker_request(model, body, route, stream=stream, raw=raw) as (reply, worker):
            if reply.status != 200:
                raise await error_of(self.upstream, model, worker, reply)
            content_type = passed_type(reply)
            if stream:
                return await pass_through(request, reply, content_type)
            data = await self.upstream.read_body(model, worker, reply)
        return web.Response(body=data, headers={"Content-Type": content_type})

    async def speech(self, request: web.Request, body: SpeechBody) -> web.StreamResponse:
        """Speak ``input`` with a speech model; the reply is the audio (module docstring)."""
        model = require_kind(self.upstream.fleet, body.model, "speech")
        fmt = body.response_format or "wav"
        if fmt == "aac" or (fmt in FFMPEG_FORMATS and not ffmpeg_found()):
            why = "is never written here" if fmt == "aac" else "needs ffmpeg, which is not installed here"
            raise refused(
                Code.AUDIO_FORMAT_UNSUPPORTED,
                f"response_format '{fmt}' {why}; ask for 'wav' or 'pcm' (16-bit little-endian samples)",
                param="response_format",
            )
        sent = body.sent
        worker_body = {
            "model": model.model["worker"]["model_name"],
            "input": body.input,
            "response_format": fmt,
            "stream": bool(body.stream),
            **_fields(sent, ("voice", "speed", "lang_code", "temperature", "top_p", "top_k", "repetition_penalty")),
            **_fields(sent, ("max_tokens",)),
        }
        if body.instructions is not None:
            worker_body["instruct"] = body.instructions  # mlx-audio's name for OpenAI's instructions
        exchange = exchange_of(request)
        if exchange is not None:
            exchange.routed(model.name, bool(body.stream), body.input)
        return await self._answer(request, model, worker_body, WorkerRoute.SPEECH, stream=bool(body.stream))

    async def transcriptions(self, request: web.Request) -> web.StreamResponse:
        """Transcribe an uploaded audio file (a form)."""
        return await self._audio(request, WorkerRoute.TRANSCRIPTIONS)

    async def translations(self, request: web.Request) -> web.StreamResponse:
        """Translate an uploaded audio file into English text (a form)."""
        return await self._audio(request, WorkerRoute.TRANSLATIONS)

    async def _audio(self, request: web.Request, route: WorkerRoute) -> web.StreamResponse:
        form = await read_form(reader_of(request.headers, request.content), self.audio_form)
        declaration = TranslationForm if route is WorkerRoute.TRANSLATIONS else TranscriptionForm
        fields = parse(declaration, dict(form.fields))
        model = require_kind(self.upstream.fleet, fields.model, "transcription")
        if not form.files:
            raise refused(Code.MISSING_PARAMETER, "'file' is required: the audio to transcribe", param="file")
        audio = await check_audio(form.files[0].data)
        sent = fields.model_dump(exclude_none=True, exclude={"model", "stream"})
        worker_fields = {"model": model.model["worker"]["model_name"], **{k: str(v) for k, v in sent.items()}}
        data, content_type = encode_form(worker_fields, [Upload("file", "audio.wav", "audio/wav", audio.wav)])
        exchange = exchange_of(request)
        if exchange is not None:
            exchange.routed(model.name, False, f"<{audio.seconds:.1f} s of audio>")
        return await self._answer(request, model, worker_fields, route, raw=Raw(data, content_type))

    async def generations(self, request: web.Request, body: ImageGenerationBody) -> web.Response:
        """Draw ``n`` images of ``prompt`` with an image-generation model."""
        model = require_kind(self.upstream.fleet, body.model, "image_generation")
        worker_body = self._image_body(model, body.sent)
        return await self._images(request, model, worker_body, WorkerRoute.IMAGE_GENERATIONS)

    async def edits(self, request: web.Request) -> web.Response:
        """Edit uploaded images (a form): stored by the front, named to the worker, removed after."""
        form = await read_form(reader_of(request.headers, request.content), self.edit_form)
        fields = parse(ImageEditForm, dict(form.fields))
        model = require_kind(self.upstream.fleet, fields.model, "image_generation")
        if not form.files:
            raise refused(Code.MISSING_PARAMETER, "'image' is required: the image(s) to edit", param="image")
        for index, upload in enumerate(form.files):
            await asyncio.to_thread(check_image, upload.data, f"image.{index}", whole=True)
        worker_body = self._image_body(model, fields.model_dump(exclude_none=True))
        async with self.uploads(form.files) as paths:
            worker_body["image"] = paths
            return await self._images(request, model, worker_body, WorkerRoute.IMAGE_EDITS)

    def _image_body(self, model: Lifecycle, sent: dict[str, Any]) -> dict[str, Any]:
        size = sent.get("size")
        return {
            "model": model.model["worker"]["model_name"],
            "prompt": sent["prompt"],
            "response_format": "b64_json",
            **({"size": size} if size not in (None, "auto") else {}),
            **_fields(sent, ("n", "steps", "seed", "guidance")),
        }

    async def _images(
        self, request: web.Request, model: Lifecycle, body: dict[str, Any], route: WorkerRoute
    ) -> web.Response:
        exchange = exchange_of(request)
        if exchange is not None:
            exchange.routed(model.name, False, body["prompt"])
        doc = await self.upstream.worker_json(model, body, route)
        data = doc.get("data") if isinstance(doc, dict) else None
        whole = isinstance(data, list) and all(isinstance(d, dict) and isinstance(d.get("b64_json"), str) for d in data)
        if not whole or not isinstance(data, list):
            raise refused(Code.WORKER_FAILED, "the model worker's images reply is malformed")
        kept = ("b64_json", "revised_prompt")
        images = [{k: d[k] for k in kept if d.get(k) is not None} for d in data]
        created = doc.get("created") if isinstance(doc.get("created"), int) else 0
        return json_response({"created": created, "data": images, "output_format": "png"})

    @contextlib.asynccontextmanager
    async def uploads(self, files: list[Upload]) -> AsyncIterator[list[str]]:
        """Write checked images into a new private directory the worker may read; remove it afterwards."""
        root = self.socket_dir / UPLOADS_DIR
        root.mkdir(mode=0o700, exist_ok=True)
        where = Path(tempfile.mkdtemp(prefix="edit-", dir=root))
        try:
            paths = []
            for index, upload in enumerate(files):
                path = where / f"image-{index}"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(upload.data)
                paths.append(str(path))
            yield paths
        finally:
            shutil.rmtree(where, ignore_errors=True)
