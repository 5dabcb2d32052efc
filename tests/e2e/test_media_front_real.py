"""The media endpoints through a real front over the real media workers, on the tiny speech and transcription models.

The same fleet as tests/integration/test_media_front.py (``media_support.media_config``), with the stand-in's
argv swapped for the wrapped ``mlx-vlm-speech`` and ``mlx-vlm-transcription`` entries (the image model keeps the
stand-in: its tiny pipeline costs far more, and its worker's upload directory is wired by the plan). The tiny
models and the media entries come with the media worker's side of issue 52: until they are in this checkout, the
module is skipped.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.conftest import free_port
from tests.contract_support import contract
from tests.gateway_support import Gateway, Reply, start_gateway
from tests.media_support import FORM_TYPE, form_body, media_config, standin_argv, wav_bytes

tiny_tts = pytest.importorskip("tests.fixtures.tiny_tts", reason="the tiny speech model comes with the media workers")
tiny_stt = pytest.importorskip("tests.fixtures.tiny_stt", reason="the tiny transcription model too")

pytestmark = pytest.mark.e2e

RUNTIMES = {"speech": "mlx-vlm-speech", "transcription": "mlx-vlm-transcription"}


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    """Run a front whose speech and transcription models are the real workers of the tiny models."""
    directory = tmp_path_factory.mktemp("media-real")
    models = {
        "speech": Path(tiny_tts.build_tiny_tts(directory / "tts")),
        "transcription": Path(tiny_stt.build_tiny_stt(directory / "stt")),
    }
    standin = standin_argv(directory)

    def argv_of(kind: str) -> list[str]:
        if kind not in models:
            return standin(kind)
        model = str(models[kind])
        return [
            sys.executable,
            "-m",
            "mlx_agent.runtime",
            RUNTIMES[kind],
            "--model",
            model,
            "--mlx-agent-socket",
            "{socket}",
            *contract(),
        ]

    config = media_config(directory, free_port(), argv_of)
    for model in config["models"]:
        kind = model["worker"]["kind"]
        if kind in models:
            model["worker"]["model_name"] = str(models[kind])  # the recipes' model_field: the worker names its path
            model["worker"]["ready_timeout"] = 300
    gateway = start_gateway(directory, config)
    try:
        yield gateway, directory
    finally:
        gateway.stop()


@pytest.fixture
def client(front: tuple[Gateway, Path]) -> openai.OpenAI:
    """Return the official openai client for the front."""
    return openai.OpenAI(base_url=front[0].base_url + "/v1", api_key="unused", max_retries=0, timeout=300)


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


def test_wrong_kinds_and_bad_audio_are_refused_by_the_front(front: tuple[Gateway, Path]) -> None:
    """Each real model refuses the other's endpoint, and bytes that are no audio are 400 audio_invalid."""
    gateway, _ = front
    reply = gateway.request("POST", "/v1/audio/speech", {"model": "org/stt", "input": "hi"})
    assert (reply.status, reply.json()["error"]["code"]) == (400, "model_not_speech")
    reply = transcribe(gateway, "org/speech", wav_bytes(0.5))
    assert (reply.status, reply.json()["error"]["code"]) == (400, "model_not_transcription")
    reply = transcribe(gateway, "org/stt", b"not audio at all")
    assert (reply.status, reply.json()["error"]["code"]) == (400, "audio_invalid")
    assert transcribe(gateway, "org/stt", wav_bytes(0.5)).status == 200  # the worker still answers
