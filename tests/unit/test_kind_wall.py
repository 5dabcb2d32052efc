"""The media worker's kind wall, in front of a stand-in app: what reaches mlx-vlm, and what is refused before it.

The wall is plain ASGI, so these tests drive it with asyncio and an app that records what it was given; the real
worker behind it is tests/e2e/test_media_worker_socket.py's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.media_kinds import IMAGE_GENERATION, SPEECH, TRANSCRIPTION, MediaKind
from mlx_agent.runtime.entries.kind_wall import KindWall, SchemaCheck
from mlx_agent.runtime.entries.mlx_vlm_media import BoundLoader

pytestmark = pytest.mark.fast

MODEL = "/models/bound"


class Recorder:
    """An ASGI app that answers 200 and keeps the body (and scope) it received."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        """Read the whole body, keep it, answer 200."""
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def call(
    kind: MediaKind,
    path: str,
    body: bytes,
    *,
    content_type: str = "application/json",
    uploads: Path | None = None,
    schema: SchemaCheck | None = None,
) -> tuple[int, Any, Recorder]:
    """Send one POST through a wall of ``kind``; return the status, the parsed answer (or raw bytes), the app."""
    app = Recorder()
    wall = KindWall(app, kind, MODEL, uploads, schema)
    scope = {"type": "http", "method": "POST", "path": path, "headers": [(b"content-type", content_type.encode())]}
    sent = [{"type": "http.request", "body": body, "more_body": False}]
    out: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return sent.pop(0) if sent else {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        out.append(message)

    asyncio.run(wall(scope, receive, send))
    raw = b"".join(m.get("body", b"") for m in out if m["type"] == "http.response.body")
    answer = raw if raw == b"ok" else json.loads(raw)
    return out[0]["status"], answer, app


def code(answer: Any) -> str:
    """Return an OpenAI error answer's code."""
    return str(answer["error"]["code"])


def test_a_request_without_model_reaches_the_app_naming_the_bound_one() -> None:
    """A speech body without ``model`` is passed on with the bound model's path written in."""
    status, _, app = call(SPEECH, "/v1/audio/speech", b'{"input": "hi", "response_format": "wav"}')
    assert status == 200 and json.loads(app.bodies[0]) == {"input": "hi", "response_format": "wav", "model": MODEL}


def test_another_model_or_path_is_refused_before_the_app() -> None:
    """A body naming another model (a Hub id) is 404 model_not_found; the app never sees it."""
    status, answer, app = call(SPEECH, "/v1/audio/speech", b'{"input": "hi", "model": "hexgrad/Kokoro-82M"}')
    assert (status, code(answer), app.bodies) == (404, "model_not_found", [])


def test_each_kind_answers_only_its_own_paths() -> None:
    """A speech worker refuses the transcription and chat paths; an image worker the speech path (404)."""
    for kind, path in [
        (SPEECH, "/v1/audio/transcriptions"),
        (SPEECH, "/v1/chat/completions"),
        (IMAGE_GENERATION, "/v1/audio/speech"),
        (TRANSCRIPTION, "/v1/images/generations"),
        (TRANSCRIPTION, "/unload"),
    ]:
        status, answer, app = call(kind, path, b"{}")
        assert (status, code(answer), app.bodies) == (404, "unknown_endpoint", []), (kind, path)


@pytest.mark.parametrize(
    ("kind", "path", "field", "value"),
    [
        (SPEECH, "/v1/audio/speech", "ref_audio", "/etc/passwd"),
        (IMAGE_GENERATION, "/v1/images/generations", "output_path", "/tmp/x.png"),
        (IMAGE_GENERATION, "/v1/images/generations", "output_dir", "/tmp"),
        (IMAGE_GENERATION, "/v1/images/generations", "response_format", "path"),
        (IMAGE_GENERATION, "/v1/images/generations", "prompt_expansion_model", "Qwen/Qwen3-8B"),
        (IMAGE_GENERATION, "/v1/images/generations", "upsample_prompt", True),
        (IMAGE_GENERATION, "/v1/images/edits", "image", "/etc/hosts"),
        (IMAGE_GENERATION, "/v1/images/edits", "image", ["/etc/hosts"]),
    ],
)
def test_a_field_naming_a_server_path_or_model_is_400(kind: MediaKind, path: str, field: str, value: Any) -> None:
    """Fields that name a file to read or write, or a model to load, are 400 unsupported_parameter, named."""
    status, answer, app = call(kind, path, json.dumps({"prompt": "x", field: value}).encode())
    assert (status, code(answer), answer["error"]["param"], app.bodies) == (400, "unsupported_parameter", field, [])


def test_harmless_values_of_those_fields_pass() -> None:
    """``response_format: b64_json`` and ``upsample_prompt: false`` are what the server does anyway: allowed."""
    body = b'{"prompt": "x", "response_format": "b64_json", "upsample_prompt": false}'
    status, _, app = call(IMAGE_GENERATION, "/v1/images/generations", body)
    assert status == 200 and len(app.bodies) == 1


def test_an_edit_image_must_lie_in_the_fronts_upload_directory(tmp_path: Path) -> None:
    """An edit's image path is taken only inside the directory the front stores checked uploads in."""
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    (uploads / "a.png").write_bytes(b"png")
    inside = json.dumps({"prompt": "x", "image": [str(uploads / "a.png")]}).encode()
    assert call(IMAGE_GENERATION, "/v1/images/edits", inside, uploads=uploads.resolve())[0] == 200
    escape = json.dumps({"prompt": "x", "image": str(uploads / ".." / "a.png")}).encode()
    assert call(IMAGE_GENERATION, "/v1/images/edits", escape, uploads=uploads.resolve())[0] == 400


def form(fields: dict[str, str]) -> tuple[bytes, str]:
    """Return a multipart form body of text fields and a one-byte file, and its content type."""
    boundary = "wallboundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n' for k, v in fields.items()]
    upload = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nx\r\n'
    return f"{''.join(parts)}{upload}--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_a_transcription_form_must_name_the_bound_model() -> None:
    """A form naming the bound model passes whole; another model is 404, none is 400 missing_parameter."""
    body, content_type = form({"model": MODEL, "language": "en"})
    status, _, app = call(TRANSCRIPTION, "/v1/audio/transcriptions", body, content_type=content_type)
    assert status == 200 and app.bodies == [body]
    body, content_type = form({"model": "openai/whisper-large-v3"})
    status, answer, _ = call(TRANSCRIPTION, "/v1/audio/translations", body, content_type=content_type)
    assert (status, code(answer)) == (404, "model_not_found")
    body, content_type = form({"language": "en"})
    status, answer, _ = call(TRANSCRIPTION, "/v1/audio/transcriptions", body, content_type=content_type)
    assert (status, code(answer)) == (400, "missing_parameter")


def test_the_bound_loader_loads_nothing_else() -> None:
    """The stand-in for mlx-vlm's loader passes the bound model as its kind, and refuses another model or kind."""
    from fastapi import HTTPException

    calls: list[tuple[str, str]] = []
    loader = BoundLoader(lambda path, adapter, *, model_kind: calls.append((path, model_kind)), MODEL, ("audio_tts",))
    loader(MODEL, model_kind="audio_tts")
    for path, kind in [("hexgrad/Kokoro-82M", "audio_tts"), (MODEL, "text_generation"), (MODEL, "audio_stt")]:
        with pytest.raises(HTTPException):
            loader(path, model_kind=kind)
    assert calls == [(MODEL, "audio_tts")]


def test_a_body_the_endpoints_schema_refuses_is_400_before_the_app() -> None:
    """The schema check sees the body with the bound model written in; what it refuses is 400 invalid_value."""
    seen: list[dict[str, Any]] = []

    def schema(path: str, doc: dict[str, Any]) -> tuple[str, str | None] | None:
        seen.append(doc)
        return ("steps: must be at least 1", "steps") if doc.get("steps") == 0 else None

    status, answer, app = call(
        IMAGE_GENERATION, "/v1/images/generations", b'{"prompt": "x", "steps": 0}', schema=schema
    )
    assert (status, code(answer), answer["error"]["param"], app.bodies) == (400, "invalid_value", "steps", [])
    assert seen == [{"prompt": "x", "steps": 0, "model": MODEL}]
    assert call(IMAGE_GENERATION, "/v1/images/generations", b'{"prompt": "x"}', schema=schema)[0] == 200
