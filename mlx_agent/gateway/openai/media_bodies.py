"""What the OpenAI family's media endpoints accept: speech, transcriptions, translations, image generations, edits.

Every declaration is closed: an undeclared field is 400 ``unsupported_parameter``. That is how the fields of
mlx-vlm's own server that name a path on this machine or another model are refused (``ref_audio``,
``output_path``, ``output_dir``, ``prompt_expansion_model``): a request may not have the worker open, write or
load what it names. Every number that reaches a generation is bounded (mlx-vlm bounds none of steps, size,
``max_tokens``).

The audio and edit endpoints take forms (``multipart``): their text fields are declared here as strings are
read from a form (``strict`` off, so ``"0.2"`` is a temperature), their file parts in ``media.py``.
"""

from __future__ import annotations

import shutil
from functools import cache
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, field_validator

from mlx_agent.bodies import Body, Temperature, TopK, Unit

MAX_SPEECH_INPUT = 4096  # characters, OpenAI's bound on speech input
MAX_SPEECH_TOKENS = 4096  # audio tokens one speech request may generate (mlx-vlm's default is 1200, unbounded)
MAX_PROMPT = 32_000  # characters of an image prompt (OpenAI's gpt-image bound)
MAX_IMAGES_OUT = 10  # images per request (OpenAI's n)
MAX_IMAGE_SIDE = 4096
MAX_GENERATED_PIXELS = 2048 * 2048  # a diffusion model's activations grow with the pixels far past its weights
MAX_STEPS = 100  # denoising steps
SIDE_MULTIPLE = 16  # the diffusion models' latent patches (a side not a multiple fails in the worker)
# Speech formats mlx-audio writes by itself, and those it writes only through ffmpeg (aac: never).
NATIVE_FORMATS = ("wav", "pcm")
FFMPEG_FORMATS = ("mp3", "flac", "opus")
SPEECH_FORMATS = Literal["wav", "pcm", "mp3", "flac", "opus", "aac"]
TRANSCRIPT_FORMATS = Literal["json", "text", "verbose_json", "srt", "vtt"]

Voice = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
Language = Annotated[str, Field(pattern=r"^[A-Za-z]{2,3}([_-][A-Za-z0-9]{2,8})?$")]


@cache
def ffmpeg_found() -> bool:
    """Say whether the worker can write mp3, flac and opus (mlx-audio runs ffmpeg for them)."""
    return shutil.which("ffmpeg") is not None


class SpeechBody(Body):
    """``POST /v1/audio/speech``: ``input`` spoken in ``voice``; the reply is the audio file (``response_format``)."""

    closed = True
    input: Annotated[str, Field(min_length=1, max_length=MAX_SPEECH_INPUT)]
    voice: Voice | None = None
    instructions: Annotated[str, Field(max_length=MAX_SPEECH_INPUT)] | None = None
    speed: Annotated[float, Field(ge=0.25, le=4.0, allow_inf_nan=False)] | None = None
    response_format: SPEECH_FORMATS | None = None
    stream_format: Literal["audio"] | None = None  # "sse" (OpenAI's event stream of audio) is not written here
    stream: bool | None = None
    lang_code: Annotated[str, Field(pattern=r"^[A-Za-z]{1,3}([_-][A-Za-z0-9]{2,8})?$")] | None = None
    temperature: Temperature | None = None
    top_p: Unit | None = None
    top_k: TopK | None = None
    repetition_penalty: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)] | None = None
    max_tokens: Annotated[int, Field(ge=1, le=MAX_SPEECH_TOKENS)] | None = None


def _size(value: Any) -> Any:
    """Check an image ``size``: ``auto`` or ``WxH``, each side a multiple of 16, within the pixel cap."""
    if value is None or value == "auto":
        return value
    if not isinstance(value, str):
        raise ValueError("must be a string such as '1024x1024'")
    width, x, height = value.partition("x")
    if not x or not width.isdigit() or not height.isdigit() or len(width) > 5 or len(height) > 5:
        raise ValueError("must be 'auto' or WIDTHxHEIGHT such as '1024x1024'")
    w, h = int(width), int(height)
    if not (SIDE_MULTIPLE <= w <= MAX_IMAGE_SIDE and SIDE_MULTIPLE <= h <= MAX_IMAGE_SIDE):
        raise ValueError(f"each side must be {SIDE_MULTIPLE} to {MAX_IMAGE_SIDE} pixels")
    if w % SIDE_MULTIPLE or h % SIDE_MULTIPLE:
        raise ValueError(f"each side must be a multiple of {SIDE_MULTIPLE}")
    if w * h > MAX_GENERATED_PIXELS:
        raise ValueError(f"at most {MAX_GENERATED_PIXELS} pixels")
    return value


class ImageOptions(Body):
    """The fields image generations and edits share (bounded: mlx-vlm bounds none of them)."""

    closed = True
    prompt: Annotated[str, Field(min_length=1, max_length=MAX_PROMPT)]
    n: Annotated[int, Field(ge=1, le=MAX_IMAGES_OUT)] | None = None
    size: str | None = None
    steps: Annotated[int, Field(ge=1, le=MAX_STEPS)] | None = None
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = None
    guidance: Annotated[float, Field(ge=0, le=30, allow_inf_nan=False)] | None = None
    response_format: str | None = None
    output_format: Literal["png"] | None = None
    user: str | None = None  # accepted, changes nothing

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return _size(value)

    @field_validator("response_format")
    @classmethod
    def _b64_only(cls, value: str | None) -> str | None:
        # The front keeps no image to serve at a URL, and mlx-vlm's "path" is a file on this machine.
        if value not in (None, "b64_json"):
            raise ValueError("images are answered as b64_json only (this server keeps no image to serve at a URL)")
        return value


class ImageGenerationBody(ImageOptions):
    """``POST /v1/images/generations``: ``n`` images of ``prompt``, answered as base64 PNGs."""


class ImageEditForm(ImageOptions):
    """``POST /v1/images/edits``'s text fields (its ``image`` files: ``media.edit_form``)."""

    model_config = ConfigDict(extra="allow", strict=False)


class TranscriptionForm(Body):
    """``POST /v1/audio/transcriptions``'s text fields (its ``file``: ``media.audio_form``)."""

    model_config = ConfigDict(extra="allow", strict=False)
    closed: ClassVar[bool] = True
    language: Language | None = None
    prompt: Annotated[str, Field(max_length=MAX_SPEECH_INPUT)] | None = None
    temperature: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    response_format: TRANSCRIPT_FORMATS | None = None
    stream: bool | None = None

    @field_validator("stream")
    @classmethod
    def _no_stream(cls, value: bool | None) -> bool | None:
        if value:
            raise ValueError("a stream of transcript events is not written here; send stream=false")
        return value


class TranslationForm(TranscriptionForm):
    """``POST /v1/audio/translations``'s text fields: a transcription's (``language`` is the output's: English)."""
