"""Honest errors through the wrapped server: OpenAI-style error objects, with a status that says why.

Bare mlx_lm.server answers ``{"error": "<text>"}``, and 404 for anything that fails while a generation
starts (a template error, a dead generation thread). Every answer here must be
``{"error": {"message", "type", "param", "code"}}`` with 400, 404 or 503 as the case is.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from mlx_agent.wire import EXIT_GENERATION_DIED
from tests.e2e.wrapped_support import FAULT, Server, running

pytestmark = pytest.mark.e2e

HI: Any = [{"role": "user", "content": "hi"}]


def error_of(answer: Any) -> dict[str, Any]:
    """Return the error object of an answer, checking its OpenAI shape."""
    assert isinstance(answer, dict) and set(answer) == {"error"}, answer
    error: dict[str, Any] = answer["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    return error


@pytest.fixture
def server(wrapped_tiny: Server) -> Server:
    """Return the shared wrapped server on a tiny model whose template refuses unknown roles (shared_workers)."""
    return wrapped_tiny


@pytest.mark.parametrize(
    "field,value", [("max_tokens", "lots"), ("temperature", -1), ("top_p", 2), ("logprobs", "yes"), ("seed", "x")]
)
def test_a_bad_parameter_is_400_naming_it(server: Server, field: str, value: Any) -> None:
    """mlx_lm's own parameter checks answer 400 with an error object whose param names the field."""
    with pytest.raises(openai.BadRequestError) as refused:
        server.client().chat.completions.create(model="default_model", messages=HI, extra_body={field: value})
    assert refused.value.status_code == 400
    assert refused.value.param == field
    assert refused.value.type == "invalid_request_error"


@pytest.mark.parametrize(
    "body,param",
    [
        (b"{not json", "body"),
        (b"[1, 2]", "body"),
        (json.dumps({"max_tokens": 4}).encode(), "messages"),
        (json.dumps({"messages": []}).encode(), "messages"),
        (json.dumps({"messages": [{"content": "no role"}]}).encode(), "messages.0.role"),
        (json.dumps({"messages": HI, "tools": "get_time"}).encode(), "tools"),
        (json.dumps({"messages": HI, "tool_choice": "sometimes"}).encode(), "tool_choice"),
        (json.dumps({"messages": HI, "adapters": "/elsewhere"}).encode(), "adapters"),
        (json.dumps({"messages": HI, "chat_template_kwargs": "x"}).encode(), "chat_template_kwargs"),
        (json.dumps({"messages": HI, "reasoning_effort": 3}).encode(), "reasoning_effort"),
    ],
)
def test_a_bad_body_is_400(server: Server, body: bytes, param: str) -> None:
    """A body that is not JSON, not an object, or has a bad field is a 400 with an error object."""
    status, answer = server.post(body)
    assert status == 400
    assert error_of(answer)["param"] == param


def test_a_template_error_is_400_not_404(server: Server) -> None:
    """A chat template that refuses the request is the request's fault: 400, with the template's words."""
    status, answer = server.post({"messages": [{"role": "oracle", "content": "hi"}], "max_tokens": 4})
    assert status == 400
    error = error_of(answer)
    assert (error["code"], error["param"]) == ("template_error", "messages")
    assert "Unknown role: oracle" in error["message"]
    assert "--chat-template FILE" in error["message"]  # the remedy


@pytest.mark.parametrize("stream", [False, True])
def test_an_empty_completion_prompt_is_400_and_the_worker_keeps_serving(server: Server, stream: bool) -> None:
    """A prompt that tokenizes to nothing is 400 empty_prompt; it used to end mlx_lm's generation thread."""
    status, answer = server.post({"prompt": "", "max_tokens": 3, "stream": stream}, path="/v1/completions")
    assert status == 400, answer
    assert (error_of(answer)["code"], error_of(answer)["param"]) == ("empty_prompt", "prompt")
    status, reply = server.post({"prompt": "Once", "max_tokens": 3}, path="/v1/completions")
    assert status == 200 and reply["usage"]["completion_tokens"] == 3, reply


def test_an_unknown_model_is_404_and_the_served_model_stays(server: Server) -> None:
    """A model this server does not serve is a 404 model_not_found; nothing is unloaded for it."""
    client = server.client()
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="no-such/model", messages=HI, max_tokens=4)
    assert (missing.value.code, missing.value.param) == ("model_not_found", "model")
    reply = client.chat.completions.create(model="default_model", messages=HI, max_tokens=4)
    assert reply.usage is not None and reply.usage.completion_tokens == 4


def test_the_served_model_answers_to_its_path(server: Server) -> None:
    """/v1/models answers without a Hugging Face cache, and the path it lists is accepted as the model's name."""
    with urllib.request.urlopen(f"{server.url}/v1/models") as answer:
        listed = [m["id"] for m in json.loads(answer.read())["data"]]
    status, reply = server.post({"model": listed[-1], "messages": HI, "max_tokens": 3})
    assert status == 200, reply
    assert reply["model"] == listed[-1]


@pytest.mark.parametrize(
    "path,body,kind",
    [
        ("/v1/chat/completions", {"messages": HI}, "chat.completion.chunk"),
        ("/v1/completions", {"prompt": "Once upon"}, "text_completion"),
    ],
)
def test_a_streamed_usage_chunk_is_of_its_stream(server: Server, path: str, body: Any, kind: str) -> None:
    """A stream's closing usage chunk names the stream's own object, as its other chunks do."""
    request = {"model": "default_model", "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    status, raw = server.post({**request, **body}, path=path)
    assert status == 200
    chunks = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
    assert {chunk["object"] for chunk in chunks} == {kind}
    assert chunks[-1]["usage"]["completion_tokens"] == 3 and chunks[-1]["choices"] == []


def test_a_dead_generation_thread_is_503_then_the_worker_exits(tiny_model: Path, tmp_path: Path) -> None:
    """Once the generation thread has died, requests get 503 (not 404), and the worker exits so it is replaced."""
    with running(tiny_model, tmp_path, prelude=FAULT) as faulty:
        client = faulty.client()
        with pytest.raises(openai.InternalServerError) as in_flight:
            client.chat.completions.create(model="default_model", messages=HI, max_tokens=13)
        assert (in_flight.value.status_code, in_flight.value.code) == (503, "generation_unavailable")
        status, answer = faulty.post({"messages": HI, "max_tokens": 4})
        assert status == 503
        assert error_of(answer)["type"] == "server_error"
        assert faulty.process.wait(timeout=30) == EXIT_GENERATION_DIED
        assert "generation thread died; exiting so the front starts a new worker" in faulty.log()


def test_a_sampler_that_cannot_be_built_fails_only_its_request(server: Server) -> None:
    """Values mlx_lm's own checks let through but mlx cannot use are refused before the generation thread."""
    status, answer = server.post({"messages": HI, "max_tokens": 4, "logit_bias": {"999999": 1}})
    assert status == 400 and error_of(answer)["param"] == "logit_bias.999999"
    status, answer = server.post({"messages": HI, "max_tokens": 4})
    assert status == 200
