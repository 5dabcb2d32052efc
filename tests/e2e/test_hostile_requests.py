"""Hostile requests against a real front and worker: each is a 4xx in its endpoint's shape, and nothing breaks.

Every case here once killed mlx_lm's generation thread for good, segfaulted the worker, hung, or answered
500 (see the issue "Hostile requests"). After each one a normal request must be answered, and at the end the
worker is the same process: no crash, no restart.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, free_port
from tests.e2e.front_support import CHAT, Front
from tests.e2e.wrapped_support import FAULT
from tests.gateway_support import gateway_config, real_worker_argv, start_gateway

pytestmark = pytest.mark.e2e


@pytest.fixture
def front(hostile_front: Front) -> Front:
    """Return the shared hostile eager front on the tiny model (served as ``tiny``; tests/e2e/conftest.py)."""
    return hostile_front


def error_of(answer: Any) -> dict[str, Any]:
    """Return the error object of an OpenAI- or Anthropic-shaped error answer."""
    assert isinstance(answer, dict), answer
    error: dict[str, Any] = answer["error"]
    assert isinstance(error.get("message"), str) and error["message"]
    return error


def healthy(front: Front) -> None:
    """Assert a normal request is answered (the case before it broke nothing)."""
    assert front.healthy()


CHAT_CASES = [
    ("temperature", {"temperature": 9223372036854775808}),
    ("stop", {"stop": [1]}),
    ("top_logprobs", {"top_logprobs": True}),
    ("presence_penalty", {"presence_penalty": 2**64 + 1}),
    ("frequency_penalty", {"frequency_penalty": -(2**64)}),
    ("repetition_penalty", {"repetition_penalty": 2**64 + 1}),
    ("logit_bias", {"logit_bias": {str(2**63): 5}}),
    ("logit_bias", {"logit_bias": {"99999999999": 5}}),  # segfaulted mlx_lm.server
    ("logit_bias.999999", {"logit_bias": {"999999": 5}}),  # a token id, but past this model's vocabulary
    ("max_tokens", {"max_tokens": 2**31}),
    ("max_tokens", {"max_tokens": 2**64 + 1}),
    ("max_completion_tokens", {"max_completion_tokens": 10**30}),
    ("seed", {"seed": -1}),
    ("seed", {"seed": 2**64 + 1}),
    ("temperature", {"temperature": "hot"}),
    ("top_p", {"top_p": 1.5}),
    ("messages.0.role", {"messages": [{"content": "no role"}]}),
]


@pytest.mark.parametrize("param,fields", CHAT_CASES)
def test_a_chat_field_mlx_cannot_use_is_400_naming_it(front: Front, param: str, fields: dict[str, Any]) -> None:
    """Each value that broke generation is a 400 invalid_request_error naming the field; the next request works."""
    status, headers, answer = front.send("POST", "/v1/chat/completions", {**CHAT, **fields})
    assert status == 400, answer
    error = error_of(answer)
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert headers["x-should-retry"] == "false"
    healthy(front)


@pytest.mark.parametrize(
    "path,param",
    [("/v1/chat/completions", "stop"), ("/v1/messages", "stop_sequences.0"), ("/v1/responses", "instructions")],
)
def test_a_lone_surrogate_is_400_on_every_endpoint(front: Front, path: str, param: str) -> None:
    """A string that is not valid UTF-8 (a lone surrogate in JSON) is refused before any tokenizer sees it."""
    bodies = {
        "/v1/chat/completions": '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stop":"\\udc00\\ud800"}',
        "/v1/messages": '{"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"hi"}],'
        '"stop_sequences":["\\udc00"]}',
        "/v1/responses": '{"model":"tiny","input":"hi","instructions":"\\ud800"}',
    }
    status, _, answer = front.send("POST", path, raw=bodies[path].encode())
    assert status == 400 and error_of(answer)["param"] == param, answer
    healthy(front)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"])
def test_deep_nesting_is_400_in_the_endpoints_shape(front: Front, path: str) -> None:
    """JSON nested 1,000+ deep is a 400 (it was a plain-text 500 from a RecursionError) in the API's shape."""
    status, _, answer = front.send("POST", path, raw=b'{"messages":' + b"[" * 1500 + b"]" * 1500 + b"}")
    assert status == 400
    error = error_of(answer)
    assert error["param"] == "body"
    if path == "/v1/messages":
        assert answer["type"] == "error" and error["type"] == "invalid_request_error"
    healthy(front)


def test_responses_include_must_be_strings(front: Front) -> None:
    """include: [{}] on /v1/responses is a 400 naming include.0 (it was a 500)."""
    status, _, answer = front.send("POST", "/v1/responses", {"model": "tiny", "input": "hi", "include": [{}]})
    assert status == 400 and error_of(answer)["param"] == "include.0"


@pytest.mark.parametrize("encoding", ["gzip", "br", "zstd"])
def test_a_compressed_body_is_415(front: Front, encoding: str) -> None:
    """A Content-Encoding the front does not take is 415 (gzip garbage was a 500, br a plain-text 400)."""
    status, _, answer = front.send(
        "POST", "/v1/chat/completions", raw=b"garbage", headers={"Content-Encoding": encoding}
    )
    assert status == 415 and error_of(answer)["code"] == "unsupported_content_encoding"


def test_an_unknown_method_is_405_with_allow(front: Front) -> None:
    """PATCH on an endpoint is a JSON 405 carrying Allow."""
    status, headers, answer = front.send("PATCH", "/v1/chat/completions", CHAT)
    assert status == 405 and "POST" in headers["Allow"] and error_of(answer)["code"] == "method_not_allowed"


def test_the_worker_survived_every_case(front: Front) -> None:
    """After all of the above the worker is the process the front first started (no crash, no restart)."""
    model = front.models()
    assert model["model_state"] == "loaded" and model["worker"]["pid"] == front.first_worker
    assert (model["loads"], model["worker_exits"]) == (1, 0)


def test_a_worker_whose_generation_died_is_replaced_and_counted(tiny_model: Path, tmp_path: Path) -> None:
    """If the generation thread dies anyway, the worker exits and an eager front starts a new one at once."""
    argv = real_worker_argv(tiny_model, 16)
    entry = "import sys; from mlx_agent.runtime.entry import main; sys.exit(main(sys.argv[1:]))"
    faulty = [argv[0], "-c", f"{FAULT}\n{entry}", *argv[3:]]
    config = gateway_config(
        tmp_path,
        free_port(),
        faulty,
        model_path=tiny_model,
        mode="eager",
        policy={"preload": True, "keep_loaded": True},
    )
    config["models"][0]["worker"]["env"]["PYTHONPATH"] = str(REPO_ROOT)
    gateway = start_gateway(tmp_path, config)
    try:
        deadline = time.monotonic() + 60
        while gateway.status()["model_state"] != "loaded":
            assert time.monotonic() < deadline, gateway.log_path.read_text()
            time.sleep(0.1)
        first = gateway.status()["worker"]["pid"]
        dead = gateway.chat(max_tokens=13)
        assert dead.status == 503 and dead.json()["error"]["code"] == "generation_unavailable"
        while (gateway.status()["worker"] or {}).get("pid") in (None, first):
            assert time.monotonic() < deadline, gateway.log_path.read_text()
            time.sleep(0.1)
        state = gateway.status()
        assert state["worker_exits"] == 1 and state["loads"] == 2
        assert state["last_error"]["code"] == "generation_died"
        assert gateway.chat(max_tokens=4).status == 200
        assert "its generation thread died" in gateway.log_path.read_text()
    finally:
        gateway.stop()
