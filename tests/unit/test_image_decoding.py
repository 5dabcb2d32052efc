"""Images the front accepts by their header but no worker could decode: decoded whole in the front and refused."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from mlx_agent.gateway import images
from mlx_agent.gateway.images import ImagePart, check_decoded, check_image, decode_all
from mlx_agent.gateway.upstream import read_error
from tests.media_traps import lying_png, thin_png, truncated_png
from tests.unit.image_data import PNG, PNG_URL, png_bytes
from tests.unit.image_requests import refusal

pytestmark = pytest.mark.fast

ECHO = "A" * 10_000  # what a FastAPI validation error echoes back: the client's own (base64) input
BAD_IMAGES: dict[str, Callable[[], bytes]] = {"lying": lying_png, "thin": thin_png, "truncated": truncated_png}


def url_of(raw: bytes) -> str:
    """Return ``raw`` as a PNG data URL."""
    return "data:image/png;base64," + base64.b64encode(raw).decode()


@pytest.mark.parametrize("name", sorted(BAD_IMAGES))
def test_an_undecodable_image_is_refused_naming_its_part(name: str) -> None:
    """A 68-byte PNG claiming 8K, a 4000x1 PNG and a truncated 12 MP PNG are 400 image_invalid naming the part."""
    raw = BAD_IMAGES[name]()
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, ImagePart(url_of(raw), "P")]}]}
    error = refusal(decode_all, body)
    assert (error.status, error.code, error.param) == (400, "image_invalid", "P")


@pytest.mark.parametrize("name", ["lying", "truncated"])
def test_the_header_alone_passes_what_only_decoding_refuses(name: str) -> None:
    """Damaged data passes the header check (as it did before the decode): the decode is what finds it."""
    raw = BAD_IMAGES[name]()
    assert check_image(raw, "p") is not None
    error = refusal(check_image, raw, "p", whole=True)
    assert error.code == "image_invalid" and "ends early" in error.message


def test_a_thin_image_is_refused_at_its_header() -> None:
    """An aspect ratio past 200 is refused from the header, with its size named; 200 itself passes."""
    error = refusal(check_image, thin_png(), "p")
    assert error.code == "image_invalid" and "4000x1" in error.message
    assert check_image(png_bytes(200, 1), "p", whole=True) == (200, 1)


def test_a_chat_images_param_is_its_place_in_the_chat_body() -> None:
    """A part the client wrote in chat form is named messages.N.content.M."""
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": url_of(lying_png())}]}]}
    assert refusal(decode_all, body).param == "messages.0.content.0"


def test_a_sound_image_decodes_and_is_counted_off_the_event_loop() -> None:
    """check_decoded decodes in a thread and returns the count; a body without images is not looked at twice."""
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_URL}}] * 2}]}
    assert asyncio.run(check_decoded(body)) == 2
    assert asyncio.run(check_decoded({"messages": [{"role": "user", "content": "hi"}]})) == 0
    assert check_image(PNG, "p", whole=True) == (4, 3)


def test_the_aspect_bound_is_mlx_vlms() -> None:
    """The bound is mlx-vlm's: its Qwen processors refuse a ratio over 200."""
    assert images.MAX_ASPECT_RATIO == 200


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"detail": "Cannot open video: /root/x.mp4"}, "the model worker refused the request: Cannot open video"),
        (
            {"detail": [{"loc": ["body", "messages", 0, "content"], "msg": "Input should be a string", "input": ECHO}]},
            "the model worker refused the request: messages.0.content: Input should be a string",
        ),
        (None, "the model worker answered 422"),
    ],
)
def test_a_workers_fastapi_error_becomes_the_apis_own_without_the_echoed_input(doc: Any, message: str) -> None:
    """A {"detail": ...} 4xx keeps its status and gives its message (never the input it echoes) in our shape."""
    error = read_error(422, doc)
    assert (error.status, error.code) == (422, "worker_error") and error.message.startswith(message)
    assert "AAAA" not in json.dumps(error.body()) and len(error.message) < 400
