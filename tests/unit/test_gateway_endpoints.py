"""The route table: one record per endpoint, each body's declaration its whitelist (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_agent.api_errors import Code, Family
from mlx_agent.bodies import Body, ChatBody, CompletionBody, TokenizeBody
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.anthropic.api import ANTHROPIC_PREFIX
from mlx_agent.gateway.anthropic.bodies import MessagesBody, PromptBody
from mlx_agent.gateway.door.endpoints import ENDPOINTS, Endpoint, Key
from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.ollama.bodies import (
    OllamaChatBody,
    OllamaEmbedBody,
    OllamaEmbeddingsBody,
    OllamaGenerateBody,
    OllamaShowBody,
)
from mlx_agent.gateway.openai.bodies import EmbeddingsBody, RerankBody
from mlx_agent.gateway.openai.media_bodies import ImageGenerationBody, SpeechBody
from mlx_agent.gateway.responses.bodies import ResponsesBody
from mlx_agent.wire import CONTROL_PREFIX

pytestmark = pytest.mark.fast

HI = [{"role": "user", "content": "hi"}]
VALID: dict[type[Body], dict[str, Any]] = {
    ChatBody: {"messages": HI},
    CompletionBody: {"prompt": "Once"},
    TokenizeBody: {"model": "m", "text": "Once"},
    PromptBody: {"model": "m", "messages": HI},
    MessagesBody: {"model": "m", "messages": HI, "max_tokens": 5},
    ResponsesBody: {"input": "hi"},
    EmbeddingsBody: {"model": "m", "input": "hi"},
    RerankBody: {"model": "m", "query": "q", "documents": ["d"]},
    OllamaChatBody: {"model": "m", "messages": HI},
    OllamaGenerateBody: {"model": "m", "prompt": "hi"},
    OllamaShowBody: {"model": "m"},
    OllamaEmbedBody: {"model": "m", "input": "hi"},
    OllamaEmbeddingsBody: {"model": "m", "prompt": "hi"},
    SpeechBody: {"model": "m", "input": "hi"},
    ImageGenerationBody: {"model": "m", "prompt": "a cat"},
}


def test_every_key_has_one_record_and_every_route_one_key() -> None:
    """The table names each endpoint once, and no method and path twice."""
    keys = [e.key for e in ENDPOINTS]
    assert sorted(keys) == sorted(Key) and len(set(keys)) == len(keys)
    routes = [(e.method, e.path) for e in ENDPOINTS]
    assert len(set(routes)) == len(routes)


def test_compact_is_routed_before_the_stored_response_it_would_be_taken_for() -> None:
    """/v1/responses/compact comes before /v1/responses/{response_id}, which would match it first."""
    paths = [e.path for e in ENDPOINTS]
    assert paths.index("/v1/responses/compact") < paths.index("/v1/responses/{response_id}")


def test_anthropic_endpoints_and_no_others_live_under_the_anthropic_prefix() -> None:
    """The front door's errors take Anthropic's shape by path prefix; the records agree with it."""
    for e in ENDPOINTS:
        anthropic = isinstance(e, Endpoint) and e.family is Family.ANTHROPIC
        assert anthropic == e.path.startswith(ANTHROPIC_PREFIX), e.key


def test_model_api_bodies_are_posted_and_control_takes_no_declaration() -> None:
    """Every endpoint with a declaration is a POST under /v1/; control paths keep their own body checks."""
    for e in ENDPOINTS:
        if isinstance(e, Endpoint):
            assert e.method == "POST" and e.path.startswith(("/v1/", "/api/")) and e.body in VALID, e.key
        assert not (e.path.startswith(CONTROL_PREFIX) and isinstance(e, Endpoint)), e.key


@pytest.mark.parametrize("declaration", [PromptBody, MessagesBody, ResponsesBody, EmbeddingsBody, TokenizeBody])
def test_a_closed_declaration_is_the_whitelist(declaration: type[Body]) -> None:
    """An undeclared field with a value is unsupported_parameter naming it; a null one is accepted."""
    with pytest.raises(RequestRefused) as info:
        parse(declaration, {**VALID[declaration], "zz_unknown": 1, "aa_unknown": None})
    refusal = info.value
    assert (refusal.status, refusal.code, refusal.param) == (400, Code.UNSUPPORTED_PARAMETER, "zz_unknown")
    assert refusal.message == "'zz_unknown' is not supported: the local runtime cannot honour it"
    assert parse(declaration, {**VALID[declaration], "aa_unknown": None}).sent["aa_unknown"] is None


@pytest.mark.parametrize(
    ("declaration", "field", "inner"),
    [
        (MessagesBody, "output_config", "task_budget"),
        (ResponsesBody, "reasoning", "mode"),
        (ResponsesBody, "text", "x"),
    ],
)
def test_closed_objects_inside_a_body_are_whitelists_too(declaration: type[Body], field: str, inner: str) -> None:
    """A nested declared object refuses its own undeclared fields with their dotted path."""
    with pytest.raises(RequestRefused) as info:
        parse(declaration, {**VALID[declaration], field: {inner: "on"}})
    assert (info.value.code, info.value.param) == (Code.UNSUPPORTED_PARAMETER, f"{field}.{inner}")


@pytest.mark.parametrize("declaration", [ChatBody, CompletionBody])
def test_an_open_declaration_passes_undeclared_fields_to_the_worker(declaration: type[Body]) -> None:
    """Chat and text completions keep what they do not declare, as sent (the worker reads it)."""
    doc = {**VALID[declaration], "repeat_limit": 3, "temperature": 1}
    body = parse(declaration, doc)
    assert body.sent == doc and body.sent["temperature"] == 1 and isinstance(body.sent["temperature"], int)


def test_the_parsed_body_is_typed_for_its_translator() -> None:
    """A translator reads declared fields as attributes: nested objects parsed, bounds already checked."""
    body = parse(MessagesBody, {**VALID[MessagesBody], "thinking": {"type": "enabled", "budget_tokens": 64}})
    assert body.thinking is not None and body.thinking.budget_tokens == 64 and body.max_tokens == 5
    with pytest.raises(RequestRefused) as info:
        parse(MessagesBody, {**VALID[MessagesBody], "top_k": -1})
    assert (info.value.code, info.value.param) == (Code.INVALID_VALUE, "top_k")


def test_a_tokenize_body_names_exactly_one_of_text_and_messages() -> None:
    """A text or messages is tokenized; neither or both is a 400 that says to send exactly one."""
    assert parse(TokenizeBody, {"text": "hi"}).text == "hi" and parse(TokenizeBody, {"messages": HI}).messages == HI
    for doc in ({"model": "m"}, {"text": "hi", "messages": HI}):
        with pytest.raises(RequestRefused) as info:
            parse(TokenizeBody, doc)
        assert (info.value.status, info.value.code) == (400, Code.INVALID_VALUE)
        assert "exactly one of 'text' and 'messages'" in info.value.message
