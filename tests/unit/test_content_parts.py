"""The one whitelist of chat content parts per model kind, and the one image shape every worker gets (pure)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from mlx_agent.gateway import content_parts
from mlx_agent.gateway.content_parts import MEDIA_PART_TYPES, PART_TYPES, check_messages
from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.images import IMAGE_PART_TYPES
from mlx_agent.gateway.ollama.bodies import OllamaChatBody
from mlx_agent.gateway.ollama.request import translate_chat
from mlx_agent.gateway.request import prepare
from tests.unit.image_data import PNG_B64, PNG_URL
from tests.unit.image_requests import model, refusal

pytestmark = pytest.mark.fast

HOSTILE_MEDIA: list[dict[str, Any]] = [
    {"type": "video_url", "video_url": {"url": "http://127.0.0.1:9/v.mp4"}},
    {"type": "video_url", "video_url": "file:///root/secret.mp4"},
    {"type": "input_video", "video_url": "data:video/mp4;base64,AAAA"},
    {"type": "video", "video": "/root/secret.mp4"},
    {"type": "input_audio", "input_audio": {"data": "http://127.0.0.1:9/a.wav", "format": "wav"}},
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    {"type": "audio", "audio": "/root/a.wav"},
    {"type": "audio_url", "audio_url": {"url": "ftp://host/a.wav"}},
    {"type": "input_file", "file_id": "file-1"},
    {"type": "file", "file": {"file_data": "data:application/pdf;base64,AAAA"}},
]


def user(*parts: Any) -> list[dict[str, Any]]:
    """Return one user message holding ``parts``."""
    return [{"role": "user", "content": list(parts)}]


@pytest.mark.parametrize("part", HOSTILE_MEDIA, ids=lambda p: f"{p['type']}")
@pytest.mark.parametrize("kind", ["vision", "text", None])
def test_a_video_audio_or_file_part_is_refused_on_chat_completions(part: dict[str, Any], kind: str | None) -> None:
    """Whatever it holds (a URL, a path, data), a media part is 400 media_unsupported naming it, for every kind."""
    body = {"model": "m", "messages": user({"type": "text", "text": "look"}, part)}
    error = refusal(prepare, body, model=model(kind))
    assert (error.status, error.code, error.param) == (400, "media_unsupported", "messages.0.content.1")
    assert "no URL or path" in error.message


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/i.png",
        "https://example.com/i.png",
        "file:///root/secret.png",
        "ftp://host/i.png",
        "/root/secret.png",
        "secret.png",
    ],
)
@pytest.mark.parametrize("shape", ["object", "string", "input_image", "image"])
def test_an_image_part_naming_a_url_or_a_path_is_refused(url: str, shape: str) -> None:
    """An image part in any of its shapes naming anything but data is 400 image_invalid naming the part."""
    part = {
        "object": {"type": "image_url", "image_url": {"url": url}},
        "string": {"type": "image_url", "image_url": url},
        "input_image": {"type": "input_image", "image_url": url},
        "image": {"type": "image", "image": url},
    }[shape]
    error = refusal(prepare, {"messages": user(part)}, model=model("vision"))
    assert (error.status, error.code, error.param) == (400, "image_invalid", "messages.0.content.0")


@pytest.mark.parametrize("part", ["image_url", "input_image", "image", "string"])
def test_every_image_shape_reaches_the_worker_as_the_one_image_url_object(part: str) -> None:
    """image_url as a plain string (as docs/gateway.md says), input_image and image become {"url": ...} objects."""
    sent = {
        "image_url": {"type": "image_url", "image_url": {"url": PNG_URL}},
        "input_image": {"type": "input_image", "image_url": PNG_URL},
        "image": {"type": "image", "image": PNG_URL},
        "string": {"type": "image_url", "image_url": PNG_URL},
    }[part]
    prepared = prepare({"messages": user({"type": "text", "text": "x"}, sent)}, model=model("vision"))
    assert prepared.body["messages"][0]["content"][1] == {"type": "image_url", "image_url": {"url": PNG_URL}}


def test_the_whitelist_is_declared_once_per_kind() -> None:
    """Text models take text parts, vision models images too, embedding models nothing; media on none."""
    assert PART_TYPES["text"] == frozenset(content_parts.TEXT_PART_TYPES)
    assert PART_TYPES["vision"] == PART_TYPES["text"] | frozenset(IMAGE_PART_TYPES)
    assert PART_TYPES["embedding"] == frozenset()
    assert not any(set(MEDIA_PART_TYPES) & allowed for allowed in PART_TYPES.values())


@pytest.mark.parametrize(
    ("content", "param", "code"),
    [
        ([{"type": "refusal", "refusal": "no"}], "messages.0.content.0", "unsupported_content"),
        ([{"type": "tool_use", "id": "x"}], "messages.0.content.0", "unsupported_content"),
        (["just a string"], "messages.0.content.0", "invalid_type"),
        ([{"text": "no type"}], "messages.0.content.0", "invalid_type"),
        ([{"type": 7}], "messages.0.content.0", "invalid_type"),
        ([{"type": "text", "text": 7}], "messages.0.content.0.text", "invalid_type"),
        ([{"type": "text"}], "messages.0.content.0.text", "invalid_type"),
        ({"type": "text", "text": "an object"}, "messages.0.content", "invalid_type"),
        (7, "messages.0.content", "invalid_type"),
    ],
)
def test_a_part_the_kind_does_not_take_is_refused(content: Any, param: str, code: str) -> None:
    """Unknown part types, parts that are not typed objects, and text that is not a string are 400s naming them."""
    error = refusal(check_messages, [{"role": "user", "content": content}], model="m", kind="vision")
    assert (error.status, error.code, error.param) == (400, code, param)


def test_an_image_on_a_text_model_names_the_model() -> None:
    """A text model refuses an image with model_not_vision, even after a text part."""
    parts = user({"type": "text", "text": "x"}, {"type": "image_url", "image_url": PNG_URL})
    error = refusal(check_messages, parts, model="org/tiny", kind="text")
    assert (error.code, error.param) == ("model_not_vision", "messages.0.content.1") and "'org/tiny'" in error.message


def test_text_and_string_content_pass_unchanged() -> None:
    """Text parts of every text type, string content and null content reach the worker as they were sent."""
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": [{"type": t, "text": "x"} for t in content_parts.TEXT_PART_TYPES]},
    ]
    assert check_messages(messages, model="m", kind="text") == (messages, 0)


def test_an_ollama_image_is_refused_by_its_own_name() -> None:
    """An Ollama image the front cannot read is refused naming messages.N.images.K, not the chat part it became."""
    damaged = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"not a png at all").decode()  # its magic, then nothing
    body = parse(OllamaChatBody, {"model": "m", "messages": [{"role": "user", "content": "x", "images": [damaged]}]})
    error = refusal(prepare, translate_chat(body).chat, model=model("vision"))
    assert (error.code, error.param) == ("image_invalid", "messages.0.images.0")
    chat = translate_chat(parse(OllamaChatBody, {"model": "m", "messages": [{"role": "user", "images": [PNG_B64]}]}))
    assert prepare(chat.chat, model=model("vision")).body["messages"][0]["content"][0]["image_url"] == {"url": PNG_URL}
