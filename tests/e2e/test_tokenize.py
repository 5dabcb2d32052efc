"""``POST /v1/tokenize`` through the shared keyed front to the real wrapped mlx_lm worker on the tiny local model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from tests.gateway_support import Gateway, Reply

pytestmark = pytest.mark.e2e
KEY = {"Authorization": "Bearer erin-key"}  # one of the keyed tiny front's KEYS, this module's own
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello to the world"}]


@pytest.fixture
def gateway(keyed_tiny_front: Gateway) -> Gateway:
    """Return the shared keyed front whose worker is the real runtime entry serving the tiny model (key erin-key)."""
    return keyed_tiny_front


def tokenize(gateway: Gateway, body: dict[str, Any], headers: dict[str, str] = KEY) -> Reply:
    """Send one tokenize request."""
    return gateway.request("POST", "/v1/tokenize", body, headers)


def prompt_tokens(gateway: Gateway, path: str, body: dict[str, Any]) -> int:
    """Return the prompt tokens the worker reports for a one-token generation of ``body`` on ``path``."""
    reply = gateway.request("POST", path, {"model": "org/tiny", "max_tokens": 1, **body}, KEY)
    assert reply.status == 200, reply.body
    count: int = reply.json()["usage"]["prompt_tokens"]
    return count


def test_a_text_is_tokenized_as_a_completion_reads_its_prompt(gateway: Gateway, tiny_model: Path) -> None:
    """A text's tokens are the tokenizer's own, and their count is a completion's prompt_tokens for it."""
    reply = tokenize(gateway, {"model": "org/tiny", "text": "hello world"})
    assert reply.status == 200, reply.body
    doc = reply.json()
    assert (doc["object"], doc["model"], doc["count"]) == ("tokens", "org/tiny", len(doc["tokens"]))
    own = Tokenizer.from_file(str(tiny_model / "tokenizer.json")).encode("hello world", add_special_tokens=False)
    assert doc["tokens"][-len(own.ids) :] == own.ids  # after what the tokenizer adds in front (a BOS), if anything
    assert doc["count"] == prompt_tokens(gateway, "/v1/completions", {"prompt": "hello world"})


def test_messages_are_counted_as_a_chat_renders_them(gateway: Gateway) -> None:
    """Messages count as the chat with the same messages reports its prompt: template and generation prompt."""
    reply = tokenize(gateway, {"model": "org/tiny", "messages": MESSAGES})
    assert reply.status == 200, reply.body
    doc = reply.json()
    assert doc["count"] == len(doc["tokens"]) == prompt_tokens(gateway, "/v1/chat/completions", {"messages": MESSAGES})
    bare = tokenize(gateway, {"model": "org/tiny", "text": MESSAGES[1]["content"]}).json()
    assert doc["count"] > bare["count"]  # the template's own tokens are counted too


def test_the_door_and_the_declaration_refuse_before_the_worker(gateway: Gateway) -> None:
    """No key is 401, a foreign Host 403; a body without text or messages, or with an extra field, is 400."""
    body = {"model": "org/tiny", "text": "hi"}
    keyless = tokenize(gateway, body, headers={})
    assert (keyless.status, keyless.json()["error"]["code"]) == (401, "invalid_api_key")
    foreign = tokenize(gateway, body, headers={**KEY, "Host": "attacker.example"})
    assert (foreign.status, foreign.json()["error"]["code"]) == (403, "forbidden_host")
    neither = tokenize(gateway, {"model": "org/tiny"})
    assert (neither.status, neither.json()["error"]["code"]) == (400, "invalid_value")
    both = tokenize(gateway, {**body, "messages": MESSAGES})
    assert (both.status, both.json()["error"]["code"]) == (400, "invalid_value")
    extra = tokenize(gateway, {**body, "add_special_tokens": False})
    assert (extra.status, extra.json()["error"]["param"]) == (400, "add_special_tokens")
    unknown = tokenize(gateway, {"model": "org/other", "text": "hi"})
    assert (unknown.status, unknown.json()["error"]["code"]) == (404, "model_not_found")
