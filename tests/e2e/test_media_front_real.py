"""The media endpoints through a real front over the real media workers of the tiny speech, recogniser and image models.

The session's ``media_fleet`` (tests/e2e/media_fleet_support.py): the same fleet as
tests/integration/test_media_front.py (``media_support.media_config``: one front, models loaded on request), with
the stand-in's argv swapped for the wrapped ``mlx-vlm-speech``, ``mlx-vlm-transcription`` and ``mlx-vlm-image``
entries; the chat model keeps the stand-in. tests/e2e/test_media_worker_socket.py talks to the same workers on their
sockets. One more test serves a model eagerly through ``serve start``.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import openai
import pytest

from tests.conftest import Agent, free_port
from tests.gateway_support import Gateway, Reply
from tests.media_support import FORM_TYPE, form_body, wav_bytes

pytestmark = pytest.mark.e2e


@pytest.fixture
def client(media_fleet: Gateway) -> openai.OpenAI:
    """Return the official openai client for the front."""
    return openai.OpenAI(base_url=media_fleet.base_url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_speech_is_real_audio_in_each_written_format(client: openai.OpenAI) -> None:
    """The tiny speech model's audio comes back as a WAV file and as raw 16-bit samples."""
    wav = client.audio.speech.create(model="org/speech", input="hi", voice="x", extra_body={"max_tokens": 8})
    assert wav.response.headers["content-type"] == "audio/wav" and wav.content[:4] == b"RIFF"
    pcm = client.audio.speech.create(
        model="org/speech", input="hi", voice="x", response_format="pcm", extra_body={"max_tokens": 8}
    )
    assert pcm.response.headers["content-type"] == "audio/pcm" and len(pcm.content) % 2 == 0 and pcm.content


def test_transcripts_come_back_in_each_format(client: openai.OpenAI) -> None:
    """The tiny transcription model answers JSON and SRT for the front's re-encoded upload."""
    upload = ("speech.wav", wav_bytes(1.0))
    text = client.audio.transcriptions.create(model="org/stt", file=upload)
    assert isinstance(text.text, str)
    srt = client.audio.transcriptions.create(model="org/stt", file=upload, response_format="srt")
    assert "-->" in str(srt)


def transcribe(gateway: Gateway, model: str, data: bytes) -> Reply:
    """Post ``data`` as a transcription's file, naming ``model``."""
    body = form_body({"model": model}, [("file", "a.wav", data)])
    return gateway.request("POST", "/v1/audio/transcriptions", raw=body, headers={"Content-Type": FORM_TYPE})


def test_wrong_kinds_and_bad_audio_are_refused_by_the_front(media_fleet: Gateway) -> None:
    """Each real model refuses the other's endpoint, and bytes that are no audio are 400 audio_invalid."""
    gateway = media_fleet
    reply = gateway.request("POST", "/v1/audio/speech", {"model": "org/stt", "input": "hi"})
    assert (reply.status, reply.json()["error"]["code"]) == (400, "model_not_speech")
    reply = transcribe(gateway, "org/speech", wav_bytes(0.5))
    assert (reply.status, reply.json()["error"]["code"]) == (400, "model_not_transcription")
    reply = transcribe(gateway, "org/stt", b"not audio at all")
    assert (reply.status, reply.json()["error"]["code"]) == (400, "audio_invalid")
    assert transcribe(gateway, "org/stt", wav_bytes(0.5)).status == 200  # the worker still answers


def png(color: tuple[int, int, int]) -> bytes:
    """Return a 32x32 PNG of one colour."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(out, format="PNG")
    return out.getvalue()


def is_png(b64: str | None) -> bool:
    """Say whether a base64 string holds a PNG file."""
    return b64 is not None and base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n"


def test_images_are_drawn_and_edited_by_the_real_pipeline(client: openai.OpenAI, media_fleet: Gateway) -> None:
    """images.generate and the SDK's multipart images.edit reach the tiny pipeline and come back as PNGs."""
    drawn = client.images.generate(model="org/image", prompt="a red cube", size="16x16", extra_body={"steps": 1})
    assert drawn.data is not None and is_png(drawn.data[0].b64_json)
    edited = client.images.edit(
        model="org/image",
        image=("red.png", png((200, 30, 30))),
        prompt="make it blue",
        size="16x16",
        extra_body={"steps": 1},
    )
    assert edited.data is not None and is_png(edited.data[0].b64_json)
    uploads = Path(media_fleet.config["socket_dir"]) / "uploads"
    assert not uploads.exists() or list(uploads.iterdir()) == []  # the edit's stored image is gone with its reply


def test_a_speech_model_served_eagerly_answers_the_sdk(agent: Agent, tiny_tts: Path) -> None:
    """``serve start --confirm`` of the tiny speech model: loaded before confirm returns, the SDK gets WAV audio."""
    port = free_port()
    receipt = agent.launch("--path", str(tiny_tts), "--port", str(port), "--runtime", "auto")
    try:
        [served] = receipt["plan"]["models"]
        assert served["worker"]["kind"] == "speech"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)
        listed = {m.id: m for m in client.models.list()}
        assert getattr(listed[served["served_model_name"]], "kind", None) == "speech"
        wav = client.audio.speech.create(
            model=served["served_model_name"], input="hi", voice="x", extra_body={"max_tokens": 8}
        )
        assert wav.response.headers["content-type"] == "audio/wav" and wav.content[:4] == b"RIFF"
        status = agent.run("serve", "status", "--port", str(port))
        [server] = status.data["servers"]
        [model] = server["models"]
        assert server["state"] == "running" and model["kind"] == "speech", server
        assert model["endpoints"] == ["/v1/audio/speech"]
    finally:
        agent.run("serve", "stop", "--port", str(port))
