"""Images in a chat request: the one shape every API sends to a worker, and the limits the front holds them to.

Every API's image becomes a chat ``image_url`` part with a ``data:`` URL (``image_part``, an ``ImagePart`` that
remembers the client's name for it), as chat completions sends it; an image a tool returned is put in a user
message after the tool's (a chat ``tool`` message holds text only: the Messages and Responses translators).
Nothing is ever fetched: a remote (``http(s)://``) URL, a file path or a file id is refused, and so would be the
worker's own fetch (mlx_lm's server opens http(s) image URLs itself; mlx_vlm's opens paths too).

Limits, the same on every API (docs/gateway.md, "Images"), checked before the request reaches a worker:

* ``MAX_IMAGE_BYTES`` decoded bytes per image: 413 ``image_too_large``;
* ``MAX_IMAGES`` images per request: 400 ``too_many_images``;
* ``MAX_IMAGE_PIXELS`` pixels per image, read from the image's header first (Pillow's lazy ``Image.open``):
  400 ``image_too_large``; a body Pillow cannot identify is 400 ``image_invalid``;
* then every pixel is decoded as mlx-vlm's ``load_image`` does (``check_decoded``, off the event loop, one
  image at a time): data that ends early or lies about its size, and a side more than ``MAX_ASPECT_RATIO``
  times the other (mlx-vlm's Qwen processors refuse those), are 400 ``image_invalid`` naming the part, where
  the worker would have failed the request with a 500.

mlx-vlm also reads three request fields that set the size its processor makes every image (``min_pixels``,
``max_pixels``, ``resize_shape``; chat completions passes undeclared fields on): ``check_processing`` holds
them to ``MAX_IMAGE_PIXELS`` (400 ``invalid_value``, or ``invalid_type``, naming the field), so a tiny image
cannot be blown up past what an image sent whole may be (a ``min_pixels`` of 10**9 would have the worker
allocate gigabytes), and a zero side is refused here where the worker answered it with a 500.

Without Pillow in the front's environment (mlx-vlm brings it) the image is not read and the worker judges.
Which part types a model kind takes at all is ``content_parts``' declaration.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import threading
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import refused

MAX_IMAGE_BYTES = 8 * 1024 * 1024
MAX_IMAGES = 16
MAX_IMAGE_PIXELS = 7680 * 4320  # 8K UHD; far more than a vision tower reads (it resizes), far less than a bomb
# mlx_vlm's Qwen processors refuse a longer side 200 times the shorter ("absolute aspect ratio must be smaller
# than 200"); an image that thin carries nothing a model could read, whatever the processor.
MAX_ASPECT_RATIO = 200
# The part types a chat runtime reads as an image (mlx_lm's and mlx_vlm's servers take all three).
IMAGE_PART_TYPES = ("image_url", "input_image", "image")
# One image decoded at a time in the whole front: a decoded 8K image is about 100 MB of pixels.
DECODING = threading.Lock()


@dataclass(frozen=True)
class ImageLimits:
    """How much image a request may carry."""

    max_bytes: int = MAX_IMAGE_BYTES
    max_images: int = MAX_IMAGES
    max_pixels: int = MAX_IMAGE_PIXELS


LIMITS = ImageLimits()


class ImagePart(dict[str, Any]):
    """A chat ``image_url`` part the front wrote, with the client's name for it (``param``) for its refusals.

    It is sent as the plain part it is; only the front can make one, so a part that is one was written here.
    """

    def __init__(self, url: str, param: str) -> None:
        """Make the part of ``url`` (a data URL), named ``param`` in the client's request."""
        super().__init__(type="image_url", image_url={"url": url})
        self.param = param


def image_part(url: str, param: str) -> ImagePart:
    """Return the chat completions part of an image's data URL (checked or not), named ``param`` by the client."""
    return ImagePart(url, param)


def data_url(media_type: str, data: str) -> str:
    """Return the data URL of base64 ``data`` of ``media_type`` (an Anthropic base64 source)."""
    return f"data:{media_type};base64,{data}"


def _refuse_remote(url: str, param: str) -> RequestRefused:
    if url.startswith(("http://", "https://")):
        message = "remote image URLs are not fetched here; send the image inline as base64 or a data: URL"
    else:  # file://, ftp://, a path: nothing a request names is opened either
        message = "an image must be a data: URL (data:image/png;base64,...) or base64 data; no URL or path is opened"
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


def check_image(raw: bytes, param: str, limits: ImageLimits = LIMITS, *, whole: bool = False) -> tuple[int, int] | None:
    """Check one decoded image against the limits; return its (width, height), or None without Pillow.

    The header alone is read unless ``whole``: then every pixel is, as mlx-vlm's ``load_image`` reads them
    (its EXIF turn and its RGB conversion), so data that ends early or lies about its size is refused here.
    """
    if len(raw) > limits.max_bytes:
        raise _too_many_bytes(len(raw), limits, param)
    try:
        from PIL import Image, ImageOps
    except ImportError:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as image:  # lazy: reads the header, decodes no pixel
                width, height = image.size
                _check_size(width, height, param, limits)
                if whole:
                    with DECODING:
                        ImageOps.exif_transpose(image).convert("RGB")
    except RequestRefused:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        _check_size(limits.max_pixels + 1, 1, param, limits)  # Pillow's own bound is far above ours
    except Exception as exc:  # Pillow raises many kinds for a body it cannot read
        what = "cannot be decoded (its data is damaged or ends early)" if whole else "cannot be read"
        raise refused(
            Code.IMAGE_INVALID, f"the image {what}: {_reason(exc)}; send a whole PNG, JPEG, GIF or WebP", param=param
        ) from None
    return width, height


def _check_size(width: int, height: int, param: str, limits: ImageLimits) -> None:
    if width * height > limits.max_pixels:
        raise refused(
            Code.IMAGE_TOO_LARGE,
            f"an image has {width * height} pixels; at most {limits.max_pixels} per image are accepted",
            param=param,
        )
    if min(width, height) < 1 or max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        raise refused(
            Code.IMAGE_INVALID,
            f"an image of {width}x{height} pixels is too thin: its longer side may be at most {MAX_ASPECT_RATIO} "
            "times its shorter",
            param=param,
        )


def _reason(exc: Exception) -> str:
    text = str(exc).splitlines()[0][:120] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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
    """Yield each image part of a chat body's messages with its param (the client's, or ``messages.N.content.M``)."""
    if not isinstance(messages, list):
        return
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list):
            continue
        for part_index, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES:
                param = part.param if isinstance(part, ImagePart) else f"messages.{index}.content.{part_index}"
                yield param, part


def check_images(parts: list[tuple[str, Mapping[str, Any]]], limits: ImageLimits = LIMITS) -> None:
    """Check a request's images: their count, and each one's data URL, bytes and header."""
    if len(parts) > limits.max_images:
        raise refused(
            Code.TOO_MANY_IMAGES,
            f"the request carries {len(parts)} images; at most {limits.max_images} per request are accepted",
            param="messages",
        )
    for param, part in parts:
        check_data_url(part_url(part), param, limits)


def _pixels(value: object) -> bool:
    """Say whether ``value`` is a whole number of pixels (not a bool), at least one."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_processing(body: Mapping[str, Any], limits: ImageLimits = LIMITS) -> None:
    """Refuse mlx-vlm's image-size fields (module doc) that are not whole pixels or reach past ``max_pixels``."""
    bound = limits.max_pixels
    for name in ("min_pixels", "max_pixels"):
        value = body.get(name)
        if value is not None and not (_pixels(value) and value <= bound):
            code = Code.INVALID_VALUE if isinstance(value, int) and not isinstance(value, bool) else Code.INVALID_TYPE
            raise refused(code, f"'{name}' must be a whole number of pixels from 1 to {bound}", param=name)
    shape = body.get("resize_shape")
    if shape is None:
        return
    sides = shape if isinstance(shape, list) else [shape]  # one side: a square, as mlx-vlm reads it
    if not 1 <= len(sides) <= 2 or not all(_pixels(side) for side in sides) or sides[0] * sides[-1] > bound:
        raise refused(
            Code.INVALID_VALUE,
            f"'resize_shape' must be one side (a square) or [height, width] in whole pixels, at most {bound} "
            "pixels in all",
            param="resize_shape",
        )


def decode_all(body: Mapping[str, Any], limits: ImageLimits = LIMITS) -> int:
    """Decode every image of a chat body whole (``check_image(whole=True)``); return how many (blocking)."""
    parts = list(image_parts(body.get("messages")))
    for param, part in parts:
        check_image(decode(part_url(part), param, limits), param, limits, whole=True)
    return len(parts)


async def check_decoded(body: Mapping[str, Any], limits: ImageLimits = LIMITS) -> int:
    """Decode a chat body's images in a thread, so the front's other streams flow meanwhile (``decode_all``)."""
    if not any(True for _ in image_parts(body.get("messages"))):
        return 0
    return await asyncio.to_thread(decode_all, body, limits)
