"""Images in a chat request: the one shape every API sends to a worker, and the limits the front holds them to.

Every API's image becomes a chat ``image_url`` part with a ``data:`` URL (``image_part``), as chat completions
sends it; an image a tool returned is put in a user message after the tool's (a chat ``tool`` message holds
text only: the Messages and Responses translators). Nothing is ever fetched: a remote (``http(s)://``) URL, a
file path or a file id is refused, and so would be the worker's own fetch (mlx_lm's server opens http(s) image
URLs itself; mlx_vlm's opens paths too).

Limits, the same on every API (docs/gateway.md, "Images"), checked before the request reaches a worker:

* ``MAX_IMAGE_BYTES`` decoded bytes per image: 413 ``image_too_large``;
* ``MAX_IMAGES`` images per request: 400 ``too_many_images``;
* ``MAX_IMAGE_PIXELS`` pixels per image, read from the image's header only (Pillow's lazy ``Image.open``: no
  pixel is decoded in the front): 400 ``image_too_large``; a body Pillow cannot identify is 400 ``image_invalid``.
  Without Pillow in the front's environment (mlx-vlm brings it) the header is not read and the worker judges.

A model that reads text only refuses an image with 400 ``model_not_vision`` naming it (``check_request``).
"""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.http_errors import refused

MAX_IMAGE_BYTES = 8 * 1024 * 1024
MAX_IMAGES = 16
MAX_IMAGE_PIXELS = 7680 * 4320  # 8K UHD; far more than a vision tower reads (it resizes), far less than a bomb
# The part types a chat runtime reads as an image (mlx_lm's and mlx_vlm's servers take all three).
IMAGE_PART_TYPES = ("image_url", "input_image", "image")


@dataclass(frozen=True)
class ImageLimits:
    """How much image a request may carry."""

    max_bytes: int = MAX_IMAGE_BYTES
    max_images: int = MAX_IMAGES
    max_pixels: int = MAX_IMAGE_PIXELS


LIMITS = ImageLimits()


def image_part(url: str) -> dict[str, Any]:
    """Return the chat completions part of an image whose data URL has been checked (``check_data_url``)."""
    return {"type": "image_url", "image_url": {"url": url}}


def data_url(media_type: str, data: str) -> str:
    """Return the data URL of base64 ``data`` of ``media_type`` (an Anthropic base64 source)."""
    return f"data:{media_type};base64,{data}"


def _refuse_remote(url: str, param: str) -> RequestRefused:
    if url.startswith(("http://", "https://")):
        message = "remote image URLs are not fetched here; send the image inline as base64 or a data: URL"
    else:
        message = "an image must be a data: URL (data:image/png;base64,...) or base64 data"
    return refused(Code.IMAGE_INVALID, message, param=param)


def decode(url: object, param: str, limits: ImageLimits = LIMITS) -> bytes:
    """Return the bytes of an image's ``data:image/...;base64,`` URL; refuse anything else (400 ``image_invalid``)."""
    if not isinstance(url, str) or not url:
        raise refused(Code.IMAGE_INVALID, "an image needs its URL as a string", param=param)
    if not url.startswith("data:"):
        raise _refuse_remote(url, param)
    head, comma, payload = url.partition(",")
    media = head.removeprefix("data:").split(";")
    if not comma or not media[0].startswith("image/") or "base64" not in media[1:]:
        raise refused(Code.IMAGE_INVALID, "an image data URL must be data:image/<type>;base64,<data>", param=param)
    if len(payload) > (limits.max_bytes * 4) // 3 + 4:  # refused before decoding what would be too large anyway
        raise _too_many_bytes(len(payload) * 3 // 4, limits, param)
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise refused(Code.IMAGE_INVALID, "the image's base64 data does not decode", param=param) from None


def _too_many_bytes(size: int, limits: ImageLimits, param: str) -> RequestRefused:
    return refused(
        Code.IMAGE_TOO_LARGE,
        f"an image is {size} bytes decoded; at most {limits.max_bytes} bytes per image are accepted",
        param=param,
        status=413,
    )


def check_image(raw: bytes, param: str, limits: ImageLimits = LIMITS) -> tuple[int, int] | None:
    """Check one decoded image against the limits; return its (width, height), or None without Pillow."""
    if len(raw) > limits.max_bytes:
        raise _too_many_bytes(len(raw), limits, param)
    try:
        from PIL import Image
    except ImportError:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as image:  # lazy: reads the header, decodes no pixel
                width, height = image.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        width, height = limits.max_pixels + 1, 1  # Pillow's own bound is far above ours
    except Exception:  # Pillow raises many kinds for a body it cannot read
        raise refused(
            Code.IMAGE_INVALID, "the image cannot be read (not a PNG, JPEG, GIF, WebP, ...)", param=param
        ) from None
    if width * height > limits.max_pixels:
        raise refused(
            Code.IMAGE_TOO_LARGE,
            f"an image has {width * height} pixels; at most {limits.max_pixels} per image are accepted",
            param=param,
        )
    return width, height


def check_data_url(url: object, param: str, limits: ImageLimits = LIMITS) -> str:
    """Return ``url`` once it is a data URL of an image within the limits (what a translator calls per image)."""
    check_image(decode(url, param, limits), param, limits)
    assert isinstance(url, str)  # decode refused anything else
    return url


def part_url(part: Mapping[str, Any]) -> object:
    """Return the URL of a chat image part (``image_url`` an object or a string, as runtimes read it)."""
    value = part.get("image_url", part.get("image", part.get("url")))
    return value.get("url") if isinstance(value, Mapping) else value


def image_parts(messages: object) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Yield each image part of a chat body's messages with its param (``messages.N.content.M``)."""
    if not isinstance(messages, list):
        return
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        for part_index, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES:
                yield f"messages.{index}.content.{part_index}", part


def check_request(body: Mapping[str, Any], *, model: str, kind: str | None, limits: ImageLimits = LIMITS) -> int:
    """Check a chat body's images (count, each one, the model's kind); return how many it carries.

    ``kind`` is the worker's (``WorkerRecord.kind``): "text" refuses any image naming ``model``; None (a config
    written before kinds) checks the images and lets the worker judge the model.
    """
    parts = list(image_parts(body.get("messages")))
    if not parts:
        return 0
    if kind == "text":
        raise refused(
            Code.MODEL_NOT_VISION,
            f"the model '{model}' reads text only and cannot take images; send text, or serve a vision model "
            "(mlx-vlm) and name it",
            param=parts[0][0],
        )
    if len(parts) > limits.max_images:
        raise refused(
            Code.TOO_MANY_IMAGES,
            f"the request carries {len(parts)} images; at most {limits.max_images} per request are accepted",
            param="messages",
        )
    for param, part in parts:
        check_data_url(part_url(part), param, limits)
    return len(parts)
