"""Images inside tool results: the tool message keeps the text, a user message after the run carries the images."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_agent.gateway.images import LIMITS
from mlx_agent.gateway.request import prepare
from tests.unit.image_data import PNG_B64, PNG_URL
from tests.unit.image_requests import anthropic_chat, messages_body, model, refusal, responses_chat

pytestmark = pytest.mark.fast

IMAGE_BLOCK = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}}
IMAGE_PART = {"type": "image_url", "image_url": {"url": PNG_URL}}
CALL = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "a.png"}}]}


def read_round(*user: dict[str, Any]) -> dict[str, Any]:
    """Return a Messages request: an assistant Read call, then a user turn of ``user`` blocks."""
    return {"model": "org/tiny", "max_tokens": 8, "messages": [CALL, {"role": "user", "content": list(user)}]}


def test_a_tool_result_image_follows_the_tool_message_in_a_user_message() -> None:
    """Claude Code's Read of an image: the tool message holds the text, the next user message the image."""
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a.png"}, IMAGE_BLOCK]}
    chat = anthropic_chat(read_round(result))
    assert chat["messages"][1:] == [
        {"role": "tool", "tool_call_id": "t1", "content": "a.png"},
        {"role": "user", "content": [IMAGE_PART]},
    ]


def test_the_images_of_a_run_of_tool_results_open_the_turns_next_text_in_order() -> None:
    """Two results with images keep their tool messages together; their images, then the turn's text, follow."""
    other = {"type": "image", "source": {"type": "url", "url": PNG_URL.replace("png", "jpeg", 1)}}
    chat = anthropic_chat(
        read_round(
            {"type": "tool_result", "tool_use_id": "t1", "content": [IMAGE_BLOCK]},
            {"type": "tool_result", "tool_use_id": "t2", "content": [other, {"type": "text", "text": "b"}]},
            {"type": "text", "text": "Compare them."},
        )
    )
    jpeg = {"type": "image_url", "image_url": {"url": PNG_URL.replace("png", "jpeg", 1)}}
    assert chat["messages"][1:] == [
        {"role": "tool", "tool_call_id": "t1", "content": ""},
        {"role": "tool", "tool_call_id": "t2", "content": "b"},
        {"role": "user", "content": [IMAGE_PART, jpeg, {"type": "text", "text": "Compare them."}]},
    ]


def test_a_text_only_tool_result_is_unchanged() -> None:
    """Without an image a tool result is one tool message and nothing follows it."""
    chat = anthropic_chat(read_round({"type": "tool_result", "tool_use_id": "t1", "content": "plain"}))
    assert chat["messages"][1:] == [{"role": "tool", "tool_call_id": "t1", "content": "plain"}]


@pytest.mark.parametrize(
    ("source", "code"),
    [({"type": "url", "url": "https://example.com/a.png"}, "image_invalid"), ({"type": "file"}, "image_invalid")],
)
def test_a_tool_result_image_is_held_to_the_same_checks(source: dict[str, Any], code: str) -> None:
    """A remote URL or a file source inside a tool_result is refused naming the block inside it."""
    body = messages_body({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": source}]})
    error = refusal(anthropic_chat, body)
    assert error.code == code and str(error.param).startswith("messages.0.content.0.content.0.source")


def test_a_document_inside_a_tool_result_stays_refused() -> None:
    """Only text and image blocks can be carried out of a tool_result."""
    document = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}
    error = refusal(anthropic_chat, messages_body({"type": "tool_result", "tool_use_id": "t", "content": [document]}))
    assert (error.code, error.param) == ("unsupported_content", "messages.0.content.0.content.0")


def function_round(*outputs: Any, after: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Return a Responses request: a function call, one function_call_output per ``outputs``, then ``after``."""
    items: list[dict[str, Any]] = [{"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"}]
    items += [{"type": "function_call_output", "call_id": f"c{i + 1}", "output": out} for i, out in enumerate(outputs)]
    return {"input": items + (after or [])}


def test_a_function_call_output_image_becomes_a_user_message_after_the_outputs() -> None:
    """The outputs stay tool messages side by side; their images follow as one user message, before the next item."""
    image = {"type": "input_image", "image_url": PNG_URL, "detail": "auto"}
    chat = responses_chat(
        function_round(
            [{"type": "input_text", "text": "shot.png"}, image],
            [image],
            after=[{"role": "user", "content": "What changed?"}],
        )
    )
    assert chat["messages"][1:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "shot.png"},
        {"role": "tool", "tool_call_id": "c2", "content": ""},
        {"role": "user", "content": [IMAGE_PART, IMAGE_PART]},
        {"role": "user", "content": "What changed?"},
    ]


def test_a_last_output_image_ends_the_conversation_as_a_user_message() -> None:
    """With nothing after the output its images are the last message, so the model answers after seeing them."""
    chat = responses_chat(function_round([{"type": "input_image", "image_url": PNG_URL}]))
    assert chat["messages"][-1] == {"role": "user", "content": [IMAGE_PART]}


def test_an_output_image_by_file_id_or_remote_url_is_refused_naming_the_output_part() -> None:
    """A file_id or an http URL in an output list is 400 image_invalid at input.N.output.M."""
    error = refusal(responses_chat, function_round([{"type": "input_image", "file_id": "file-1"}]))
    assert (error.code, error.param) == ("image_invalid", "input.1.output.0.file_id")
    remote = [{"type": "input_text", "text": "x"}, {"type": "input_image", "image_url": "https://e.com/a.png"}]
    error = refusal(responses_chat, function_round(remote))
    assert (error.code, error.param) == ("image_invalid", "input.1.output.1.image_url")


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_a_text_only_model_refuses_a_tool_result_image(api: str) -> None:
    """The prepared body of a tool-result image is model_not_vision on a text model, and passes on a vision one."""
    if api == "messages":
        body = anthropic_chat(read_round({"type": "tool_result", "tool_use_id": "t1", "content": [IMAGE_BLOCK]}))
    else:
        body = responses_chat(function_round([{"type": "input_image", "image_url": PNG_URL}]))
    error = refusal(prepare, body, model=model("text"))
    assert (error.code, error.param) == ("model_not_vision", f"messages.{len(body['messages']) - 1}.content.0")
    assert prepare(body, model=model("vision")).body["messages"] == body["messages"]


def test_tool_result_images_count_toward_the_request_limit() -> None:
    """Images out of tool results are counted with the others: one past MAX_IMAGES is too_many_images."""
    results = [
        {"type": "tool_result", "tool_use_id": f"t{i}", "content": [IMAGE_BLOCK]} for i in range(LIMITS.max_images)
    ]
    body = anthropic_chat(read_round(*results, IMAGE_BLOCK))
    error = refusal(prepare, body, model=model("vision"))
    assert (error.code, error.param) == ("too_many_images", "messages")
