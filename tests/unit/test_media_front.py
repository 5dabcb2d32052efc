"""The media endpoints' pure parts: their bodies, multipart reading, audio decoding, and the kind refusals."""

from __future__ import annotations

import asyncio
import io
import wave
from pathlib import Path
from typing import Any

import pytest
from aiohttp import StreamReader
from aiohttp.base_protocol import BaseProtocol
from multidict import CIMultiDict, CIMultiDictProxy

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.audio_check import RATE, AudioLimits, decode_audio
from mlx_agent.gateway.door.config import parse_config
from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.model_kinds import PATHS, chat_refusal, require_kind
from mlx_agent.gateway.models.fleet import Fleet
from mlx_agent.gateway.multipart import Form, FormSpec, encode_form, read_form, reader_of
from mlx_agent.gateway.openai.media_bodies import (
    MAX_SPEECH_INPUT,
    ImageGenerationBody,
    SpeechBody,
    TranscriptionForm,
)
from tests.media_support import FORM_TYPE, MODELS, form_body, media_config, wav_bytes

pytestmark = pytest.mark.fast

SPEC = FormSpec(
    fields=frozenset({"model", "prompt"}),
    files=frozenset({"file"}),
    max_files=1,
    max_file_bytes=100,
    max_total_bytes=150,
    too_large=Code.AUDIO_TOO_LARGE,
)


def refusal(call: Any, *args: Any) -> tuple[int, str, str | None]:
    """Return the status, code and param of the refusal ``call(*args)`` raises."""
    with pytest.raises(RequestRefused) as caught:
        call(*args)
    return caught.value.status, str(caught.value.code), caught.value.param


def read(body: bytes, content_type: str = FORM_TYPE, spec: FormSpec = SPEC) -> Form:
    """Return ``read_form`` of ``body`` fed through aiohttp's own stream reader (no socket)."""

    async def run() -> Form:
        stream = StreamReader(BaseProtocol(asyncio.get_running_loop()), 2**16, loop=asyncio.get_running_loop())
        stream.feed_data(body)
        stream.feed_eof()
        headers = CIMultiDictProxy(CIMultiDict({"Content-Type": content_type}))
        return await read_form(reader_of(headers, stream), spec)

    return asyncio.run(run())


def test_a_form_is_read_into_fields_and_one_file() -> None:
    """Declared fields and the one file part come back as sent."""
    form = read(form_body({"model": "m", "prompt": "p"}, [("file", "a.wav", b"abc")]))
    assert form.fields == {"model": "m", "prompt": "p"}
    assert [(f.name, f.filename, f.data) for f in form.files] == [("file", "a.wav", b"abc")]


@pytest.mark.parametrize(
    ("fields", "files", "expected"),
    [
        ({"other": "x"}, [], (400, "unsupported_parameter", "other")),
        ({}, [("file", "a", b"1"), ("file", "b", b"2")], (400, "multipart_invalid", "file")),
        ({"file": "https://example.com/a.wav"}, [], (400, "multipart_invalid", "file")),
        ({}, [("prompt", "p.txt", b"x")], (400, "multipart_invalid", "prompt")),
        ({}, [("file", "a", b"x" * 101)], (413, "audio_too_large", "file")),
        ({"prompt": "p" * 100}, [("file", "a", b"x" * 90)], (413, "audio_too_large", "file")),
    ],
)
def test_forms_are_held_to_their_spec(
    fields: dict[str, str], files: list[tuple[str, str, bytes]], expected: tuple[int, str, str | None]
) -> None:
    """Unknown names, a second file, text for the file, a file for text, and parts past the caps are refused."""
    assert refusal(read, form_body(fields, files)) == expected


def test_bodies_that_are_no_form_are_refused() -> None:
    """JSON, no boundary, a form that breaks off, too many or too long part headers, nesting: multipart_invalid."""
    assert refusal(read, b"{}", "application/json")[:2] == (400, "multipart_invalid")
    assert refusal(read, b"x", "multipart/form-data")[:2] == (400, "multipart_invalid")
    cut = form_body({"model": "m"}, [("file", "a", b"abc")])[:-30]
    assert refusal(read, cut)[:2] == (400, "multipart_invalid")
    part = b'Content-Disposition: form-data; name="model"\r\n'
    many_headers = b"--b0undary\r\n" + b"X-H: v\r\n" * 300 + part + b"\r\nm\r\n--b0undary--\r\n"
    long_header = b"--b0undary\r\nX-H: " + b"v" * 20_000 + b"\r\n" + part + b"\r\nm\r\n--b0undary--\r\n"
    nested = b"--b0undary\r\n" + part + b"Content-Type: multipart/mixed; boundary=z\r\n\r\n--z--\r\n--b0undary--\r\n"
    for hostile in (many_headers, long_header, nested, b"no boundary at all\r\n" * 10):
        assert refusal(read, hostile)[:2] == (400, "multipart_invalid")


def test_the_front_form_round_trips() -> None:
    """What ``encode_form`` writes for a worker reads back as the same fields and file."""
    from mlx_agent.gateway.multipart import Upload

    body, content_type = encode_form(
        {"model": "m", "prompt": "a\r\n--b"}, [Upload("file", "a.wav", "audio/wav", b"\0")]
    )
    form = read(body, content_type)
    assert form.fields == {"model": "m", "prompt": "a\r\n--b"}
    assert form.files[0].data == b"\0"


def test_audio_is_reencoded_as_16k_mono() -> None:
    """A 22 kHz stereo WAV becomes a 16 kHz mono 16-bit WAV of the same length."""
    audio = decode_audio(wav_bytes(2.0))
    with wave.open(io.BytesIO(audio.wav)) as reader:
        assert (reader.getnchannels(), reader.getsampwidth(), reader.getframerate()) == (1, 2, RATE)
        assert reader.getnframes() == 2 * RATE
    assert audio.seconds == 2.0


def test_bad_long_and_large_audio_are_refused() -> None:
    """No sound is audio_invalid, past the seconds cap audio_too_long, past the byte cap 413 audio_too_large."""
    assert refusal(decode_audio, b"") == (400, "audio_invalid", "file")
    assert refusal(decode_audio, b"RIFF" + b"\0" * 100) == (400, "audio_invalid", "file")
    assert refusal(decode_audio, wav_bytes(0)) == (400, "audio_invalid", "file")
    assert refusal(decode_audio, wav_bytes(3), "file", AudioLimits(max_seconds=2)) == (400, "audio_too_long", "file")
    assert refusal(decode_audio, wav_bytes(1), "file", AudioLimits(max_bytes=100)) == (413, "audio_too_large", "file")


def test_speech_body_bounds() -> None:
    """Speech input, voice, speed and path fields are held to the declaration."""
    ok = parse(SpeechBody, {"input": "hi", "voice": "af_heart", "speed": 1.5, "response_format": "pcm"})
    assert (ok.input, ok.voice, ok.response_format) == ("hi", "af_heart", "pcm")
    for doc, param, code in [
        ({"input": ""}, "input", "invalid_value"),
        ({"input": "x" * (MAX_SPEECH_INPUT + 1)}, "input", "invalid_value"),
        ({"input": "hi", "voice": "../../etc/passwd"}, "voice", "invalid_value"),
        ({"input": "hi", "speed": 5}, "speed", "invalid_value"),
        ({"input": "hi", "response_format": "ogg"}, "response_format", "invalid_type"),
        ({"input": "hi", "ref_audio": "/tmp/a.wav"}, "ref_audio", "unsupported_parameter"),
        ({"input": "hi", "max_tokens": 100_000}, "max_tokens", "invalid_value"),
    ]:
        assert refusal(parse, SpeechBody, doc) == (400, code, param), doc


def test_image_and_transcription_bodies() -> None:
    """Image sizes are multiples of 16 within the pixel cap, b64_json only; form fields are read from strings."""
    assert parse(ImageGenerationBody, {"prompt": "x", "size": "1024x768", "n": 10}).size == "1024x768"
    cases: list[tuple[dict[str, Any], str]] = [({"size": "1000x1000"}, "size"), ({"size": "16x9999"}, "size")]
    for doc, param in [*cases, ({"n": 0}, "n")]:
        assert refusal(parse, ImageGenerationBody, {"prompt": "x", **doc}) == (400, "invalid_value", param)
    assert refusal(parse, ImageGenerationBody, {"prompt": "x", "output_dir": "/tmp"})[1] == "unsupported_parameter"
    form = parse(TranscriptionForm, {"temperature": "0.5", "response_format": "srt", "language": "pt-BR"})
    assert (form.temperature, form.response_format, form.language) == (0.5, "srt", "pt-BR")
    assert refusal(parse, TranscriptionForm, {"response_format": "ndjson"})[:2] == (400, "invalid_type")


def test_kinds_route_and_refuse(tmp_path: Path) -> None:
    """Each kind's model is found by name or by naming none; another kind is refused with its code."""
    config = media_config(tmp_path, 9, lambda kind: ["x", "--port", "{port}"])
    fleet = Fleet(parse_config(config))
    assert require_kind(fleet, None, "transcription").name == "org/stt"
    assert require_kind(fleet, "org/speech", "speech").name == "org/speech"
    assert refusal(require_kind, fleet, "org/chat", "speech") == (400, "model_not_speech", "model")
    assert refusal(require_kind, fleet, "org/stt", "image_generation") == (400, "model_not_image_generation", "model")
    assert refusal(require_kind, fleet, "nope", "speech")[:2] == (404, "model_not_found")
    refusals = {m.name: chat_refusal(m.model) for m in fleet.models}
    assert {name for name, found in refusals.items() if found is None} == {"org/chat"}
    assert set(PATHS) >= set(MODELS.values())
