"""Images on every chat API: the translators' one chat shape, the limits, and a text-only model's refusal."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.gateway import images
from mlx_agent.gateway.content_parts import check_messages
from mlx_agent.gateway.images import ImageLimits
from mlx_agent.gateway.request import prepare
from tests.unit.image_data import PNG, PNG_B64, PNG_URL, png_bytes
from tests.unit.image_requests import anthropic_chat, messages_body, model, refusal, responses_chat

pytestmark = pytest.mark.fast


def test_a_messages_image_becomes_the_chat_image_part_between_its_texts() -> None:
    """Base64 and data-URL image blocks become image_url parts, the turn's texts joined between them in order."""
    chat = anthropic_chat(
        messages_body(
            {"type": "text", "text": "one"},
            {"type": "text", "text": "two"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
            {"type": "image", "source": {"type": "url", "url": PNG_URL}},
            {"type": "text", "text": "three"},
        )
    )
    assert chat["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "one\n\ntwo"},
                {"type": "image_url", "image_url": {"url": PNG_URL}},
                {"type": "image_url", "image_url": {"url": PNG_URL}},
                {"type": "text", "text": "three"},
            ],
        }
    ]


def test_a_text_only_messages_turn_keeps_its_string_content() -> None:
    """Without an image a user turn's content stays one string, as before images were taken."""
    chat = anthropic_chat(messages_body({"type": "text", "text": "a"}, {"type": "text", "text": "b"}))
    assert chat["messages"] == [{"role": "user", "content": "a\n\nb"}]


@pytest.mark.parametrize(
    ("source", "param"),
    [
        ({"type": "url", "url": "https://example.com/cat.png"}, "messages.0.content.0.source.url"),
        ({"type": "url", "url": "/etc/passwd"}, "messages.0.content.0.source.url"),
        ({"type": "file", "file_id": "file_1"}, "messages.0.content.0.source.type"),
        ({"type": "base64", "media_type": "text/plain", "data": PNG_B64}, "messages.0.content.0.source"),
        ({"type": "base64", "media_type": "image/png", "data": "not base64!"}, "messages.0.content.0.source.data"),
        ({"type": "base64", "media_type": "image/png", "data": "aGVsbG8="}, "messages.0.content.0.source.data"),
    ],
)
def test_a_messages_image_that_is_remote_a_file_or_undecodable_is_refused(source: dict[str, Any], param: str) -> None:
    """Remote URLs, paths, file sources, non-image types and bad data are 400 image_invalid; nothing is fetched."""
    error = refusal(anthropic_chat, messages_body({"type": "image", "source": source}))
    assert (error.status, error.code, error.param) == (400, "image_invalid", param)


def test_a_responses_input_image_becomes_the_chat_image_part() -> None:
    """An input_image's data URL becomes an image_url part beside the message's text parts ("detail" ignored)."""
    body = {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is it?"},
                    {"type": "input_image", "image_url": PNG_URL, "detail": "high"},
                ],
            }
        ]
    }
    assert responses_chat(body)["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is it?"},
                {"type": "image_url", "image_url": {"url": PNG_URL}},
            ],
        }
    ]


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"type": "input_image", "file_id": "file-1"}, "input.0.content.1.file_id"),
        ({"type": "input_image", "image_url": "http://example.com/a.png"}, "input.0.content.1.image_url"),
        ({"type": "input_image", "image_url": "data:image/png;base64,AAAA"}, "input.0.content.1.image_url"),
    ],
)
def test_a_responses_image_by_file_or_remote_url_is_refused(part: dict[str, Any], param: str) -> None:
    """A file_id, a remote URL or unreadable data is 400 image_invalid naming the part."""
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "x"}, part]}]}
    error = refusal(responses_chat, body)
    assert (error.status, error.code, error.param) == (400, "image_invalid", param)


def check_request(body: dict[str, Any], **checks: Any) -> int:
    """Return how many images a chat body carries, once its parts pass ``check_messages``."""
    return check_messages(body["messages"], **checks)[1]


def chat_with(*urls: str) -> dict[str, Any]:
    """Return a chat completions body with one user message holding an image part per URL."""
    parts = [{"type": "text", "text": "Look."}, *({"type": "image_url", "image_url": {"url": u}} for u in urls)]
    return {"messages": [{"role": "user", "content": parts}]}


def test_the_limits_hold_size_count_and_pixels() -> None:
    """Past the bytes it is 413, past the count or the header's pixels 400 (limits shrunk for the test)."""
    limits = ImageLimits(max_bytes=len(PNG), max_images=2, max_pixels=12)
    assert check_request(chat_with(PNG_URL, PNG_URL), model="m", kind="vision", limits=limits) == 2
    error = refusal(check_request, chat_with(PNG_URL, PNG_URL, PNG_URL), model="m", kind="vision", limits=limits)
    assert (error.status, error.code, error.param) == (400, "too_many_images", "messages")
    big = "data:image/png;base64," + base64.b64encode(png_bytes(8, 8)).decode()
    error = refusal(check_request, chat_with(big), model="m", kind="vision", limits=limits)
    assert (error.status, error.code, error.param) == (413, "image_too_large", "messages.0.content.1")
    wide = "data:image/png;base64," + base64.b64encode(png_bytes(5, 3, pixels=False)).decode()
    error = refusal(check_request, chat_with(wide), model="m", kind="vision", limits=ImageLimits(max_pixels=12))
    assert (error.status, error.code) == (400, "image_too_large") and "15 pixels" in error.message


def test_the_pixel_limit_reads_the_header_of_a_huge_image_without_decoding_it() -> None:
    """A 100000 x 100000 header with no pixel data is refused by its header alone, at the default limits."""
    huge = "data:image/png;base64," + base64.b64encode(png_bytes(100_000, 100_000, pixels=False)).decode()
    error = refusal(check_request, chat_with(huge), model="m", kind="vision")
    assert (error.status, error.code) == (400, "image_too_large")


def test_the_default_limits_are_the_documented_ones() -> None:
    """8 MiB, 16 images and 8K UHD pixels, as docs/gateway.md's Images table says."""
    docs = (Path(__file__).parents[2] / "docs" / "gateway.md").read_text(encoding="utf-8")
    assert (images.MAX_IMAGE_BYTES, images.MAX_IMAGES, images.MAX_IMAGE_PIXELS) == (8 << 20, 16, 33_177_600)
    assert "8 MiB" in docs and "| 16 (`MAX_IMAGES`)" in docs and "33,177,600" in docs


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_a_text_only_model_refuses_an_image_on_every_api_naming_it(api: str) -> None:
    """Whichever API sent it, the prepared chat body with an image is 400 model_not_vision naming the model."""
    if api == "chat":
        body = chat_with(PNG_URL)
    elif api == "messages":
        block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
        body = anthropic_chat(messages_body(block))
    else:
        body = responses_chat({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": PNG_URL}]}]})
    error = refusal(prepare, body, model=model("text"))
    assert (error.status, error.code) == (400, "model_not_vision") and "'org/tiny'" in error.message
    assert prepare(body, model=model("vision")).body["messages"] == body["messages"]


def test_a_config_without_kinds_checks_images_and_passes_them() -> None:
    """A front config written before kinds lets its worker judge images, still within the limits."""
    assert prepare(chat_with(PNG_URL), model=model(None)).body["messages"][0]["content"][1]["type"] == "image_url"
    error = refusal(prepare, chat_with("https://example.com/a.png"), model=model(None))
    assert error.code == "image_invalid"


def test_a_remote_url_is_refused_on_chat_completions_too() -> None:
    """mlx_lm's server would fetch an http(s) image itself; the front refuses it first, on a vision model too."""
    error = refusal(prepare, chat_with("https://example.com/cat.png"), model=model("vision"))
    assert (error.code, error.param) == ("image_invalid", "messages.0.content.1")
    assert "not fetched" in error.message


def test_an_embedding_model_refuses_chat() -> None:
    """A chat request naming an embedding model is 400 model_not_chat pointing at /v1/embeddings."""
    error = refusal(prepare, {"messages": [{"role": "user", "content": "hi"}]}, model=model("embedding"))
    assert (error.status, error.code, error.param) == (400, "model_not_chat", "model")
    assert "/v1/embeddings" in error.message


def test_the_plan_records_a_models_kind_from_its_runtime_and_config() -> None:
    """mlx-vlm with a vision tower is vision; mlx-vlm without one, and mlx_lm, are text."""
    from mlx_agent.plan.model_plan import model_kind
    from mlx_agent.plan.recipes import load_recipe

    vlm, _ = load_recipe("mlx-vlm")
    lm, _ = load_recipe("mlx_lm")
    assert model_kind(vlm, {"model_type": "qwen2_vl", "vision_config": {"depth": 1}}) == "vision"
    assert model_kind(vlm, {"model_type": "gemma3_text"}) == "text"
    assert model_kind(lm, {"model_type": "llama"}) == "text"


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("min_pixels", 10**9, "invalid_value"),
        ("min_pixels", images.MAX_IMAGE_PIXELS + 1, "invalid_value"),
        ("max_pixels", 0, "invalid_value"),
        ("max_pixels", 1e9, "invalid_type"),
        ("min_pixels", True, "invalid_type"),
        ("resize_shape", [0, 0], "invalid_value"),
        ("resize_shape", [100_000, 100_000], "invalid_value"),
        ("resize_shape", 100_000, "invalid_value"),
        ("resize_shape", [1, 2, 3], "invalid_value"),
        ("resize_shape", "448", "invalid_value"),
    ],
)
def test_mlx_vlms_image_size_fields_are_held_to_the_pixel_bound(field: str, value: Any, code: str) -> None:
    """A size field that is no size, or would make a small image larger than an image may be, is 400 naming it."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: value}
    error = refusal(prepare, body, model=model("vision"))
    assert (error.status, error.code, error.param) == (400, code, field)
    assert str(images.MAX_IMAGE_PIXELS) in error.message


def test_image_size_fields_within_the_bound_reach_the_worker() -> None:
    """Sizes from one pixel to the bound, a square side or [height, width], are passed on as sent."""
    sizes = {"min_pixels": 1, "max_pixels": images.MAX_IMAGE_PIXELS, "resize_shape": [448, 448]}
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **sizes}
    assert {name: prepare(body, model=model("vision")).body[name] for name in sizes} == sizes
    assert prepare({**body, "resize_shape": 448}, model=model("vision")).body["resize_shape"] == 448
