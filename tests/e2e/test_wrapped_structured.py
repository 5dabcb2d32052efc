"""Structured output through the wrapped server: response_format is enforced while generating (llguidance).

The models have random weights, or are scripted to write prose, so without enforcement their replies are not
JSON; bare mlx_lm.server ignores response_format.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from tests.e2e.wrapped_support import Server, running, scripted_model, thinking_model

pytestmark = pytest.mark.e2e

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
        "kind": {"enum": ["person", "robot"]},
        "verified": {"type": "boolean"},
    },
    "required": ["name", "age", "tags", "address", "kind", "verified"],
    "additionalProperties": False,
}
PERSON_FORMAT: Any = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "get_time", "description": "Now.", "parameters": {"type": "object", "properties": {}}},
    }
]


@pytest.fixture
def server(wrapped_tiny: Server) -> Server:
    """Return the shared wrapped server on the random tiny model (these tests only send requests)."""
    return wrapped_tiny


def ask(server: Server, content: str, max_tokens: int, **kwargs: Any) -> Any:
    """Ask one question with the official client; return the choice."""
    reply = server.client().chat.completions.create(
        model="default_model", max_tokens=max_tokens, messages=[{"role": "user", "content": content}], **kwargs
    )
    return reply.choices[0]


@pytest.mark.parametrize("prompt", ["Say hello", "Describe the weather", "List three fruits"])
def test_json_object_replies_parse(server: Server, prompt: str) -> None:
    """A json_object reply from random weights is a JSON object, however the model rambles."""
    choice = ask(server, prompt, 64, response_format={"type": "json_object"})
    assert isinstance(json.loads(choice.message.content), dict)


@pytest.mark.parametrize("max_tokens", [96, 400])
def test_json_schema_replies_validate(server: Server, max_tokens: int) -> None:
    """A json_schema reply validates against its schema, finished in time however long the model would go."""
    choice = ask(server, f"A person, please ({max_tokens})", max_tokens, response_format=PERSON_FORMAT)
    jsonschema.validate(json.loads(choice.message.content), PERSON)


def test_streamed_json_schema_reply_validates(server: Server) -> None:
    """The streamed pieces of an enforced reply join into a document that validates."""
    stream = server.client().chat.completions.create(
        model="default_model",
        max_tokens=128,
        stream=True,
        response_format=PERSON_FORMAT,
        messages=[{"role": "user", "content": "A person, streamed"}],
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    jsonschema.validate(json.loads(text), PERSON)


def test_text_completion_is_enforced_too(server: Server) -> None:
    """/v1/completions honours response_format as the chat endpoint does."""
    status, answer = server.post(
        {"prompt": "JSON:", "max_tokens": 48, "response_format": {"type": "json_object"}}, path="/v1/completions"
    )
    assert status == 200, answer
    assert isinstance(json.loads(answer["choices"][0]["text"]), dict)


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}},
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "(["}}},
        {"type": "json_schema", "json_schema": {"name": "x"}},
        {"type": "yaml"},
    ],
)
def test_an_invalid_schema_is_400(server: Server, response_format: Any) -> None:
    """A schema llguidance cannot enforce is refused with 400 naming response_format, before generating."""
    with pytest.raises(openai.BadRequestError) as refused:
        ask(server, "hi", 8, response_format=response_format)
    assert refused.value.status_code == 400
    assert refused.value.param == "response_format"


@pytest.fixture(scope="module")
def prose_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Serve a scripted model whose greedy answer is always the prose "Plainwords", never JSON."""
    directory = tmp_path_factory.mktemp("prose")
    model = scripted_model(
        directory, {"\n": "Plain", "Plain": "words", "words": "<|im_end|>"}, "<|im_end|>", plain=["Plain", "words"]
    )
    with running(model, directory) as started:
        yield started


def test_tools_leave_the_format_unenforced_unless_tool_choice_is_none(prose_server: Server) -> None:
    """With tools the reply may be a tool call, so the format waits; tool_choice "none" enforces it again.

    The model writes "Plainwords" whenever nothing holds it, so the unenforced reply is known, not luck.
    """
    assert ask(prose_server, "What time is it?", 48).message.content == "Plainwords"
    free = ask(prose_server, "What time is it?", 48, response_format={"type": "json_object"}, tools=TOOLS)
    assert free.message.content == "Plainwords"
    held = ask(
        prose_server, "What time is it?", 48, response_format={"type": "json_object"}, tools=TOOLS, tool_choice="none"
    )
    assert isinstance(json.loads(held.message.content), dict)
    plain_json = ask(prose_server, "What time is it?", 48, response_format={"type": "json_object"})
    assert isinstance(json.loads(plain_json.message.content), dict)


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Serve a random-weight thinking model (its template opens the thinking) through the wrapped entry."""
    model = thinking_model(tmp_path_factory.mktemp("thinking") / "model")
    with running(model, model.parent) as started:
        yield started


def test_a_thinking_model_thinks_freely_and_answers_in_the_schema(thinking_server: Server) -> None:
    """Only the answer is constrained: the thinking is free text, then the answer validates."""
    status, answer = thinking_server.post(
        {
            "messages": [{"role": "user", "content": "Think, then a person"}],
            "max_tokens": 160,
            "response_format": PERSON_FORMAT,
        }
    )
    assert status == 200, answer
    message = answer["choices"][0]["message"]
    with pytest.raises(ValueError):
        json.loads(message["reasoning"])  # the random model's own words, not JSON
    jsonschema.validate(json.loads(message["content"]), PERSON)


def test_a_draft_model_keeps_the_reply_valid(tiny_model: Path, tmp_path: Path) -> None:
    """With speculative decoding the watcher sees guesses taken back, and the reply still validates."""
    with running(tiny_model, tmp_path, "--draft-model", str(tiny_model)) as drafting:
        for max_tokens in (96, 300):
            choice = ask(drafting, f"A person, speculatively ({max_tokens})", max_tokens, response_format=PERSON_FORMAT)
            jsonschema.validate(json.loads(choice.message.content), PERSON)
