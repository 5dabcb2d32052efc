"""mlx-vlm's media endpoints through a real front over stand-in media workers (tests/media_support.py).

The front, its keys, its multipart reading, its audio decoding and its refusals are the real ones; the workers
are the stand-in, which notes what it was sent. Swapping it for the real media workers is ``media_support``'s
``argv_of``.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from mlx_agent.gateway.audio_check import MAX_AUDIO_BYTES
from tests.conditions import wait_until
from tests.conftest import free_port
from tests.gateway_support import CONTROL_TOKEN, Gateway, Reply, start_gateway
from tests.media_support import FORM_TYPE, MODELS, PNG, form_body, media_config, noted, standin_argv, wav_bytes

KEY = "sk-media-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_BODY = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    """Run a keyed front serving a speech, a transcription, an image and a chat model over stand-ins."""
    directory = tmp_path_factory.mktemp("media")
    config = media_config(directory, free_port(), standin_argv(directory), max_body_bytes=MAX_BODY)
    left = directory / "sockets" / "uploads" / "edit-left-by-a-dead-front"
    left.mkdir(parents=True)
    gateway = start_gateway(directory, config, api_keys=[KEY])
    try:
        yield gateway, directory
    finally:
        gateway.stop()


@pytest.fixture
def client(front: tuple[Gateway, Path]) -> openai.OpenAI:
    """Return the official openai client for the front."""
    return openai.OpenAI(base_url=front[0].base_url + "/v1", api_key=KEY, max_retries=0)


def post(gateway: Gateway, path: str, body: Any = None, **kw: Any) -> Reply:
    """POST with the API key."""
    headers = {**AUTH, **kw.pop("headers", {})}
    return gateway.request("POST", path, body, headers=headers, **kw)


def post_form(gateway: Gateway, path: str, fields: dict[str, str], files: list[tuple[str, str, bytes]]) -> Reply:
    """POST a multipart form with the API key."""
    return post(gateway, path, raw=form_body(fields, files), headers={"Content-Type": FORM_TYPE})


def error(reply: Reply) -> tuple[int, str, str | None]:
    """Return the status, code and param of an OpenAI-shaped error reply."""
    doc = reply.json()["error"]
    return reply.status, doc["code"], doc.get("param")


def standin_wav() -> bytes:
    """Return the WAV the stand-in speaks (0.1 s at 8 kHz)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(8000)
        writer.writeframes(b"\x01\x00" * 800)
    return out.getvalue()


def last(directory: Path) -> dict[str, Any]:
    """Return the last request a stand-in worker noted."""
    return noted(directory)[-1]


def test_speech_through_the_sdk_is_the_workers_audio(front: tuple[Gateway, Path], client: openai.OpenAI) -> None:
    """The SDK's speech call gets the worker's WAV bytes; the worker got its own model name and mlx-audio's fields."""
    _gateway, directory = front
    reply = client.audio.speech.create(model="org/speech", input="hello", voice="af_heart", instructions="calm")
    assert reply.response.headers["content-type"] == "audio/wav"
    with wave.open(io.BytesIO(reply.content)) as audio:
        assert audio.getnframes() == 800
    body = last(directory)["body"]
    assert body == {
        "model": "default_model",
        "input": "hello",
        "voice": "af_heart",
        "instruct": "calm",
        "response_format": "wav",
        "stream": False,
    }


def test_speech_formats(front: tuple[Gateway, Path]) -> None:
    """A pcm reply passes through as audio/pcm; mp3 without ffmpeg and aac always are 400 audio_format_unsupported."""
    gateway, directory = front
    reply = post(gateway, "/v1/audio/speech", {"model": "org/speech", "input": "hi", "response_format": "pcm"})
    assert (reply.status, reply.headers["content-type"], reply.body) == (200, "audio/pcm", b"\x01\x00" * 800)
    before = len(noted(directory))
    for fmt in ("mp3", "aac"):
        reply = post(gateway, "/v1/audio/speech", {"model": "org/speech", "input": "hi", "response_format": fmt})
        assert error(reply) == (400, "audio_format_unsupported", "response_format"), fmt
    assert len(noted(directory)) == before


def test_speech_refuses_path_fields(front: tuple[Gateway, Path]) -> None:
    """ref_audio and output_path (files on this machine) are 400 unsupported_parameter and never reach a worker."""
    gateway, directory = front
    before = len(noted(directory))
    for name in ("ref_audio", "output_path", "output_dir"):
        reply = post(gateway, "/v1/audio/speech", {"model": "org/speech", "input": "hi", name: "/etc/passwd"})
        assert error(reply) == (400, "unsupported_parameter", name)
    assert len(noted(directory)) == before


def test_streamed_speech_passes_pieces_as_they_come(front: tuple[Gateway, Path]) -> None:
    """The first piece of a streamed speech reaches the client while the worker still holds the rest."""
    gateway, directory = front
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    body = json.dumps({"model": "org/speech", "input": "hi", "stream": True})
    conn.request("POST", "/v1/audio/speech", body=body, headers={**AUTH, "Content-Type": "application/json"})
    response = conn.getresponse()
    piece = standin_wav()
    assert (response.status, response.getheader("content-type")) == (200, "audio/wav")
    assert response.read(len(piece)) == piece  # the stand-in waits for "go" before its second piece
    (directory / "go").touch()
    assert response.read() == piece * 2
    conn.close()
    assert last(directory)["body"]["stream"] is True


def test_worker_failures_are_carried_and_odd_types_refused(front: tuple[Gateway, Path]) -> None:
    """A worker's FastAPI error is carried with its message; a reply of a type not passed through is 502."""
    gateway, _ = front
    reply = post(gateway, "/v1/audio/speech", {"model": "org/speech", "input": "x-fail"})
    assert error(reply) == (500, "worker_error", None)
    assert "stand-in failure" in reply.json()["error"]["message"]
    reply = post(gateway, "/v1/audio/speech", {"model": "org/speech", "input": "x-html"})
    assert error(reply) == (502, "worker_failed", None)


def test_transcription_through_the_sdk_sends_the_worker_a_checked_wav(
    front: tuple[Gateway, Path], client: openai.OpenAI
) -> None:
    """The SDK's upload (22 kHz stereo) reaches the worker as a form holding a 16 kHz mono 16-bit WAV."""
    _gateway, directory = front
    upload = ("speech.wav", wav_bytes(1.5))
    text = client.audio.transcriptions.create(model="org/stt", file=upload, language="en", temperature=0.2)
    assert text.text == "stand-in transcript"
    seen = last(directory)
    assert seen["path"] == "/v1/audio/transcriptions"
    assert seen["content_type"] == "multipart/form-data"
    assert seen["fields"] == {"model": "default_model", "language": "en", "temperature": "0.2"}
    assert seen["files"]["file"] == {
        "filename": "audio.wav",
        "type": "audio/wav",
        "channels": 1,
        "rate": 16000,
        "width": 2,
        "frames": 24000,
    }
    translated = client.audio.translations.create(model="org/stt", file=upload, response_format="text")
    assert translated.strip() == "stand-in transcript"
    assert last(directory)["path"] == "/v1/audio/translations"


def test_text_transcripts_pass_through_as_text(front: tuple[Gateway, Path]) -> None:
    """response_format text is the worker's plain text with its content type."""
    gateway, _ = front
    reply = post_form(gateway, "/v1/audio/transcriptions", {"response_format": "text"}, [("file", "a", wav_bytes(1))])
    assert (reply.status, reply.body) == (200, b"stand-in transcript")
    assert reply.headers["content-type"].startswith("text/plain")


def test_bad_and_long_audio_are_refused_before_any_worker(front: tuple[Gateway, Path]) -> None:
    """Bytes that are no audio are 400 audio_invalid, more than 1500 s 400 audio_too_long; no worker sees them."""
    gateway, directory = front
    before = len(noted(directory))
    for data in (b"RIFF not really a wave file", b"", os.urandom(4096)):
        reply = post_form(gateway, "/v1/audio/transcriptions", {"model": "org/stt"}, [("file", "a.wav", data)])
        assert error(reply) == (400, "audio_invalid", "file")
    long = wav_bytes(1501, rate=1000, channels=1)  # 3 MB: under the body cap, past the duration cap
    reply = post_form(gateway, "/v1/audio/transcriptions", {"model": "org/stt"}, [("file", "a.wav", long)])
    assert error(reply) == (400, "audio_too_long", "file")
    assert len(noted(directory)) == before


def test_audio_uploads_take_25_mb_past_the_json_cap(front: tuple[Gateway, Path]) -> None:
    """An upload larger than the front's JSON body cap is transcribed; a chat body as large is 413."""
    gateway, _ = front
    big = wav_bytes(60)  # 5.3 MB, past the 4 MiB body cap
    assert len(big) > MAX_BODY
    reply = post_form(gateway, "/v1/audio/transcriptions", {"model": "org/stt"}, [("file", "a.wav", big)])
    assert reply.status == 200, reply.body
    chat = post(gateway, "/v1/chat/completions", raw=b" " * len(big), headers={"Content-Type": "application/json"})
    assert error(chat) == (413, "body_too_large", None)


def test_an_upload_past_its_cap_is_413_while_it_streams(front: tuple[Gateway, Path]) -> None:
    """A chunked upload (no Content-Length for the door to judge) past 25 MiB is 413 audio_too_large."""
    gateway, _ = front
    body = form_body({"model": "org/stt"}, [("file", "a.wav", b"\0" * (MAX_AUDIO_BYTES + 1))])
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    pieces = (body[i : i + 65536] for i in range(0, len(body), 65536))
    headers = {**AUTH, "Content-Type": FORM_TYPE}
    try:
        conn.request("POST", "/v1/audio/transcriptions", body=pieces, headers=headers, encode_chunked=True)
        response = conn.getresponse()
    except (BrokenPipeError, ConnectionResetError):
        pytest.fail("the front hung up instead of answering 413")
    doc = json.loads(response.read())
    conn.close()
    assert (response.status, doc["error"]["code"]) == (413, "audio_too_large")


@pytest.mark.parametrize(
    ("fields", "files", "code", "param"),
    [
        (
            {"model": "org/stt", "timestamp_granularities[]": "word"},
            [("file", "a", b"x")],
            "unsupported_parameter",
            None,
        ),
        ({"model": "org/stt"}, [("file", "a", b"x"), ("file", "b", b"y")], "multipart_invalid", "file"),
        ({"model": "org/stt", "file": "https://example.com/a.wav"}, [], "multipart_invalid", "file"),
        ({"model": "org/stt", "prompt": "p" * 70_000}, [("file", "a", b"x")], "invalid_value", "prompt"),
        ({"model": "org/stt", "stream": "true"}, [("file", "a", b"x")], "invalid_value", "stream"),
        ({"model": "org/stt"}, [], "missing_parameter", "file"),
    ],
)
def test_forms_are_held_to_their_declaration(
    front: tuple[Gateway, Path], fields: dict[str, str], files: list[tuple[str, str, bytes]], code: str, param: str
) -> None:
    """Unknown fields, a second file, a URL for the file, an oversized field, stream and no file are refused."""
    gateway, _ = front
    status, found, where = error(post_form(gateway, "/v1/audio/transcriptions", fields, files))
    assert (status, found) == (400, code)
    assert where == (param if param is not None else "timestamp_granularities[]")


def test_a_json_body_on_a_form_endpoint_is_refused(front: tuple[Gateway, Path]) -> None:
    """JSON sent to the transcription endpoint is 400 multipart_invalid naming Content-Type."""
    gateway, _ = front
    reply = post(gateway, "/v1/audio/transcriptions", {"model": "org/stt", "file": "/etc/passwd"})
    assert error(reply) == (400, "multipart_invalid", "Content-Type")


def test_images_through_the_sdk_are_b64_only(front: tuple[Gateway, Path], client: openai.OpenAI) -> None:
    """images.generate gets base64 PNGs and never the worker's path; url and path formats are refused."""
    gateway, directory = front
    result = client.images.generate(model="org/image", prompt="a cat", n=2, size="256x256")
    assert result.data is not None and len(result.data) == 2
    assert base64.b64decode(result.data[0].b64_json or "") == PNG
    assert "/tmp/leak.png" not in result.model_dump_json()
    assert last(directory)["body"] == {
        "model": "default_model",
        "prompt": "a cat",
        "n": 2,
        "size": "256x256",
        "response_format": "b64_json",
    }
    for fmt in ("url", "path"):
        reply = post(gateway, "/v1/images/generations", {"model": "org/image", "prompt": "x", "response_format": fmt})
        assert error(reply) == (400, "invalid_value", "response_format")
    for name in ("output_path", "prompt_expansion_model"):
        reply = post(gateway, "/v1/images/generations", {"model": "org/image", "prompt": "x", name: "/tmp/x"})
        assert error(reply) == (400, "unsupported_parameter", name)


def test_image_sizes_are_bounded(front: tuple[Gateway, Path]) -> None:
    """A side that is no multiple of 16, too many pixels, too many steps or images are 400 invalid_value."""
    gateway, _ = front
    cases: list[tuple[dict[str, Any], str]] = [
        ({"size": "100x100"}, "size"),
        ({"size": "4096x4096"}, "size"),
        ({"steps": 1000}, "steps"),
        ({"n": 11}, "n"),
    ]
    for extra, param in cases:
        reply = post(gateway, "/v1/images/generations", {"model": "org/image", "prompt": "x", **extra})
        assert error(reply) == (400, "invalid_value", param)


def test_edits_through_the_sdk_reach_the_worker_as_json_naming_front_files(
    front: tuple[Gateway, Path], client: openai.OpenAI
) -> None:
    """images.edit's form becomes JSON naming files the front wrote under its socket directory, removed after."""
    _gateway, directory = front
    result = client.images.edit(model="org/image", image=[("a.png", PNG), ("b.png", PNG)], prompt="make it blue")
    assert result.data is not None and base64.b64decode(result.data[0].b64_json or "") == PNG
    seen = last(directory)
    assert seen["path"] == "/v1/images/edits"
    paths = seen["body"]["image"]
    uploads = directory / "sockets" / "uploads"
    assert len(paths) == 2 and all(Path(p).parent.parent == uploads for p in paths)
    assert seen["opened"] == {p: len(PNG) for p in paths}
    assert not Path(paths[0]).parent.exists()
    assert [p.name for p in uploads.iterdir()] == []  # nor what a front before this one left
    assert seen["body"]["prompt"] == "make it blue"


def test_edits_refuse_what_is_no_image(front: tuple[Gateway, Path]) -> None:
    """A file that is no image is 400 image_invalid, a mask unsupported_parameter, a URL or path multipart_invalid."""
    gateway, directory = front
    before = len(noted(directory))
    fields = {"model": "org/image", "prompt": "x"}
    reply = post_form(gateway, "/v1/images/edits", fields, [("image", "a.png", b"not an image")])
    assert error(reply) == (400, "image_invalid", "image.0")
    reply = post_form(gateway, "/v1/images/edits", fields, [("image", "a.png", PNG), ("mask", "m.png", PNG)])
    assert error(reply) == (400, "unsupported_parameter", "mask")
    for where in ("https://example.com/a.png", "/etc/hosts"):  # a URL or a path is never fetched or opened
        reply = post_form(gateway, "/v1/images/edits", {**fields, "image": where}, [])
        assert error(reply) == (400, "multipart_invalid", "image")
    assert len(noted(directory)) == before


SPEECH: Any = {"input": "hi"}
IMAGE: Any = {"prompt": "x"}
CHAT: Any = {"messages": [{"role": "user", "content": "hi"}]}


def wrong_kind(gateway: Gateway, path: str, model: str) -> Reply:
    """Send ``path`` its body, naming ``model``."""
    if path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
        return post_form(gateway, path, {"model": model}, [("file", "a.wav", wav_bytes(0.1))])
    if path == "/v1/images/edits":
        return post_form(gateway, path, {"model": model, "prompt": "x"}, [("image", "a.png", PNG)])
    body = {
        "/v1/audio/speech": SPEECH,
        "/v1/images/generations": IMAGE,
        "/v1/embeddings": {"input": "hi"},
        "/v1/completions": {"prompt": "hi"},
        "/v1/messages": {**CHAT, "max_tokens": 4},
        "/v1/responses": {"input": "hi"},
        "/v1/responses/input_tokens": {"input": "hi"},
        "/v1/tokenize": {"text": "hi"},
        "/api/generate": {"prompt": "hi"},
        "/api/embed": {"input": "hi"},
    }.get(path, CHAT)
    return post(gateway, path, {**body, "model": model})


ANSWERS = {
    "speech": {"/v1/audio/speech"},
    "transcription": {"/v1/audio/transcriptions", "/v1/audio/translations"},
    "image_generation": {"/v1/images/generations", "/v1/images/edits"},
}
CODES = {
    "/v1/audio/speech": "model_not_speech",
    "/v1/audio/transcriptions": "model_not_transcription",
    "/v1/audio/translations": "model_not_transcription",
    "/v1/images/generations": "model_not_image_generation",
    "/v1/images/edits": "model_not_image_generation",
    "/v1/embeddings": "model_not_embedding",
    "/api/embed": "model_not_embedding",
}
CHAT_PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/responses/input_tokens",
    "/v1/tokenize",
    "/api/chat",
    "/api/generate",
)


def test_every_endpoint_refuses_every_other_kind(front: tuple[Gateway, Path]) -> None:
    """Each media endpoint refuses each model of another kind, and the chat APIs refuse each media model."""
    gateway, directory = front
    before = len(noted(directory))
    checked = 0
    for model, kind in MODELS.items():
        for path in [*CODES, *CHAT_PATHS]:
            if path in ANSWERS.get(kind, ()) or (kind == "text" and path in CHAT_PATHS):
                continue
            reply = wrong_kind(gateway, path, model)
            doc = reply.json()
            code = doc.get("code") if path.startswith("/api/") else doc["error"].get("code")
            assert (reply.status, code) == (400, CODES.get(path, "model_not_chat")), (model, path, doc)
            checked += 1
    assert checked == 15 + 14 + 14 + 7  # each model, every path but its own kind's
    assert len(noted(directory)) == before


def test_media_endpoints_need_a_key_and_realtime_is_501(front: tuple[Gateway, Path]) -> None:
    """Without the API key a media endpoint is 401; the realtime WebSocket is 501 realtime_unsupported."""
    gateway, _ = front
    reply = gateway.request("POST", "/v1/audio/speech", {"model": "org/speech", "input": "hi"})
    assert error(reply) == (401, "invalid_api_key", None)
    reply = gateway.request("GET", "/v1/realtime", headers=AUTH)
    assert error(reply) == (501, "realtime_unsupported", None)


def test_the_listing_says_each_models_kind_and_endpoints(front: tuple[Gateway, Path]) -> None:
    """/v1/models gives every model its kind and the endpoints it answers."""
    gateway, _ = front
    entries = {e["id"]: e for e in gateway.request("GET", "/v1/models", headers=AUTH).json()["data"]}
    assert {name: entries[name]["kind"] for name in MODELS} == {
        "org/speech": "speech",
        "org/stt": "transcription",
        "org/image": "image_generation",
        "org/chat": "text",
    }
    assert entries["org/stt"]["endpoints"] == ["/v1/audio/transcriptions", "/v1/audio/translations"]
    assert "/v1/chat/completions" in entries["org/chat"]["endpoints"]


def test_cache_stats_for_key_holders_and_reset_for_the_control_token(front: tuple[Gateway, Path]) -> None:
    """Stats answer any key holder per model; a reset needs the control token (an API key is 401)."""
    gateway, _ = front
    stats = gateway.request("GET", "/v1/cache/stats", headers=AUTH).json()["data"]
    assert [(e["model"], e["enabled"]) for e in stats] == [(name, False) for name in MODELS]
    one = gateway.request("GET", "/v1/cache/stats?model=org/stt", headers=AUTH).json()["data"]
    assert [e["model"] for e in one] == ["org/stt"]
    assert error(gateway.request("GET", "/v1/cache/stats?model=nope", headers=AUTH))[:2] == (404, "model_not_found")
    assert error(post(gateway, "/v1/cache/reset", {})) == (401, "unauthorized", None)
    reply = gateway.request("POST", "/v1/cache/reset", {}, headers={"Authorization": f"Bearer {CONTROL_TOKEN}"})
    assert reply.status == 200 and reply.json()["reset"] is False


def test_responses_input_tokens_and_cancel(front: tuple[Gateway, Path]) -> None:
    """input_tokens is the chat's prompt_tokens for the translated request; cancel returns a stored response."""
    gateway, _ = front
    reply = post(gateway, "/v1/responses/input_tokens", {"model": "org/chat", "input": "hello"})
    assert reply.status == 200, reply.body
    doc = reply.json()
    assert doc["object"] == "response.input_tokens" and doc["input_tokens"] > 0
    chat = post(
        gateway, "/v1/chat/completions", {"model": "org/chat", "messages": [{"role": "user", "content": "hello"}]}
    )
    assert doc["input_tokens"] == chat.json()["usage"]["prompt_tokens"]
    created = post(gateway, "/v1/responses", {"model": "org/chat", "input": "hello"}).json()
    cancelled = post(gateway, f"/v1/responses/{created['id']}/cancel")
    assert (cancelled.status, cancelled.json()["status"]) == (200, created["status"])
    assert error(post(gateway, "/v1/responses/resp_nope/cancel"))[:2] == (404, "not_found")


def test_a_streamed_speech_that_breaks_off_is_cut_for_the_client(front: tuple[Gateway, Path]) -> None:
    """A worker that hangs up mid-stream leaves the client a reply without its end, not a whole-looking file."""
    gateway, _ = front
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    body = json.dumps({"model": "org/speech", "input": "x-cut", "stream": True})
    conn.request("POST", "/v1/audio/speech", body=body, headers={**AUTH, "Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead) as cut:
        response.read()
    assert cut.value.partial == standin_wav()
    conn.close()


def test_a_form_that_stalls_is_cut_off_with_408(tmp_path: Path) -> None:
    """An upload whose form stops arriving is 408 body_timeout, as every body, before any worker sees it."""
    config = media_config(tmp_path, free_port(), standin_argv(tmp_path), body_timeout=1.0, body_grace=0.0)
    gateway = start_gateway(tmp_path, config)
    try:
        body = form_body({"model": "org/stt"}, [("file", "a.wav", wav_bytes(1))])
        conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
        conn.putrequest("POST", "/v1/audio/transcriptions")
        conn.putheader("Content-Type", FORM_TYPE)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body[: len(body) // 2])  # half the form, then nothing
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())["error"]["code"]) == (408, "body_timeout")
        conn.close()
        assert noted(tmp_path) == []
    finally:
        gateway.stop()


def request_lines(gateway: Gateway) -> list[dict[str, Any]]:
    """Return the model, endpoint and status of every request line the front logged so far."""
    marker = "mlx-agent front: request "
    lines = [
        json.loads(line.split(marker, 1)[1]) for line in gateway.log_path.read_text().splitlines() if marker in line
    ]
    return [{k: line[k] for k in ("model", "endpoint", "status")} for line in lines]


def test_media_requests_are_counted_and_logged_per_model(front: tuple[Gateway, Path]) -> None:
    """A speech request is in the request lines and the metrics under its model and endpoint."""
    gateway, _ = front
    assert post(gateway, "/v1/audio/speech", {"model": "org/speech", "input": "count me"}).status == 200
    line = {"model": "org/speech", "endpoint": "/v1/audio/speech", "status": 200}
    wait_until(lambda: line in request_lines(gateway), "the speech request's line")
    metrics = gateway.request("GET", "/metrics", headers=AUTH).body.decode()
    assert 'mlx_agent_requests_total{endpoint="/v1/audio/speech",model="org/speech",status="200"}' in metrics
