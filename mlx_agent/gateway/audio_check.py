"""An uploaded audio file, decoded and checked by the front, re-encoded as the one format a worker is sent.

A transcription's upload is the client's bytes: mlx-vlm's server would decode all of it (no size or duration
cap) and run ffmpeg on some. The front decodes it first, off the event loop and one upload at a time in the
whole front (``DECODING``), and hands the worker a 16-bit PCM WAV at ``RATE`` Hz, mono (every speech-recognition
model mlx-audio ships reads 16 kHz mono, and resamples anything else to it): the worker never sees the client's
format, never runs ffmpeg, and holds at most ``MAX_AUDIO_SECONDS`` of samples.

* ``MAX_AUDIO_BYTES`` bytes of upload (OpenAI's 25 MB): 413 ``audio_too_large`` (``multipart`` stops reading);
* more than ``MAX_AUDIO_SECONDS`` of sound, counted while decoding (a header's duration may lie, and a
  compressed file may hold hours): 400 ``audio_too_long``, decoding stopped there;
* bytes no decoder reads, or no sound at all: 400 ``audio_invalid``, never a 500.

With miniaudio (mlx-audio brings it, so it is there wherever the media runtimes are) WAV, MP3, FLAC and Ogg
Vorbis are read; without it, 16-bit PCM WAV only (the standard library's ``wave``).
"""

from __future__ import annotations

import asyncio
import io
import threading
import wave
from dataclasses import dataclass

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import refused

MAX_AUDIO_BYTES = 25 * 1024 * 1024
MAX_AUDIO_SECONDS = 1500  # 25 minutes, OpenAI's own bound on one transcription's audio
RATE = 16_000
WIDTH = 2  # bytes per sample: 16-bit PCM
FRAMES = RATE  # decoded a second at a time
DECODING = threading.Lock()  # one upload decoded at a time: a long one is tens of MB of samples


@dataclass(frozen=True)
class AudioLimits:
    """How much audio one upload may carry."""

    max_bytes: int = MAX_AUDIO_BYTES
    max_seconds: float = MAX_AUDIO_SECONDS


LIMITS = AudioLimits()


@dataclass(frozen=True)
class Audio:
    """An upload as the worker gets it: a mono 16-bit WAV at ``RATE`` Hz, and its length in seconds."""

    wav: bytes
    seconds: float


def _invalid(reason: str, param: str) -> RequestRefused:
    formats = "WAV, MP3, FLAC or Ogg Vorbis" if _miniaudio() else "16-bit PCM WAV"
    return refused(Code.AUDIO_INVALID, f"the audio file cannot be decoded ({reason}); send {formats}", param=param)


def _too_long(limits: AudioLimits, param: str) -> RequestRefused:
    return refused(
        Code.AUDIO_TOO_LONG,
        f"the audio is longer than {limits.max_seconds:g} seconds; split it and send the parts",
        param=param,
    )


def _miniaudio() -> bool:
    """Say whether miniaudio can be imported (mlx-audio brings it)."""
    try:
        import miniaudio  # noqa: F401
    except ImportError:
        return False
    return True


def _wav(samples: bytes) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(WIDTH)
        writer.setframerate(RATE)
        writer.writeframes(samples)
    return out.getvalue()


def _decode_miniaudio(raw: bytes, limits: AudioLimits, param: str) -> bytes:
    import miniaudio

    max_frames = int(limits.max_seconds * RATE)
    pieces: list[bytes] = []
    frames = 0
    try:
        for chunk in miniaudio.stream_memory(
            raw, output_format=miniaudio.SampleFormat.SIGNED16, nchannels=1, sample_rate=RATE, frames_to_read=FRAMES
        ):
            frames += len(chunk)
            if frames > max_frames:
                raise _too_long(limits, param)
            pieces.append(chunk.tobytes())
    except miniaudio.MiniaudioError as exc:
        reason = exc.args[0] if exc.args and isinstance(exc.args[0], str) else type(exc).__name__
        raise _invalid(reason, param) from None
    return b"".join(pieces)


def _decode_wave(raw: bytes, limits: AudioLimits, param: str) -> bytes:
    try:
        with wave.open(io.BytesIO(raw), "rb") as reader:
            if reader.getsampwidth() != WIDTH or reader.getnchannels() != 1 or reader.getframerate() != RATE:
                raise _invalid(f"without miniaudio only {RATE} Hz mono 16-bit PCM WAV is read", param)
            if reader.getnframes() > limits.max_seconds * RATE:
                raise _too_long(limits, param)
            return reader.readframes(reader.getnframes())
    except (wave.Error, EOFError) as exc:
        raise _invalid(str(exc), param) from None


def decode_audio(raw: bytes, param: str = "file", limits: AudioLimits = LIMITS) -> Audio:
    """Return the upload as the worker's WAV; raise ``RequestRefused`` as the module docstring says."""
    if len(raw) > limits.max_bytes:
        raise refused(
            Code.AUDIO_TOO_LARGE, f"the audio file is larger than {limits.max_bytes} bytes", param=param, status=413
        )
    if not raw:
        raise _invalid("the file is empty", param)
    with DECODING:
        samples = _decode_miniaudio(raw, limits, param) if _miniaudio() else _decode_wave(raw, limits, param)
    if not samples:
        raise _invalid("it holds no sound", param)
    return Audio(_wav(samples), len(samples) / WIDTH / RATE)


async def check_audio(raw: bytes, param: str = "file", limits: AudioLimits = LIMITS) -> Audio:
    """Return ``decode_audio`` of the upload, decoded in a thread (a long file takes a while)."""
    return await asyncio.to_thread(decode_audio, raw, param, limits)
