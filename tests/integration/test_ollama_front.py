"""The Ollama API's front door, errors, refusals, keep_alive rule and request lines (a real front, a stand-in worker).

The chat stand-in (``tests.gateway_support.CHAT_STAND_IN``) streams a fixed answer, tool-call fragments, or a
stream that breaks off; the front, its keys and its checks are the real ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ollama
import pytest

from tests.gateway_support import Gateway, chat_stand_in_argv, running_gateway

KEY = "sk-ollama-test-key"
HI: Any = [{"role": "user", "content": "hi"}]
MANAGEMENT = [
    ("POST", "/api/pull"),
    ("POST", "/api/push"),
    ("POST", "/api/create"),
    ("POST", "/api/copy"),
    ("DELETE", "/api/delete"),
    ("POST", "/api/blobs/sha256:abc"),
    ("HEAD", "/api/blobs/sha256:abc"),
]


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run a keyed front over the chat stand-in."""
    directory = tmp_path_factory.mktemp("ollama")
    env = {"STAND_IN_LOG": str(directory / "bodies.jsonl"), "STAND_IN_RELEASE": str(directory / "release")}
    with running_gateway(directory, chat_stand_in_argv(directory), api_keys=[KEY], env=env) as gateway:
        yield gateway


def auth(**more: str) -> dict[str, str]:
    """Return the key header, with ``more``."""
    return {"Authorization": f"Bearer {KEY}", **more}


def lines(body: bytes) -> list[Any]:
    """Return an NDJSON body's objects."""
    return [json.loads(line) for line in body.splitlines()]


def test_the_ollama_paths_take_the_same_keys_as_v1(keyed: Gateway) -> None:
    """No key or a wrong one is 401 in Ollama's shape; a Bearer key (the clients' headers option) or x-api-key works."""
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        reply = keyed.request("GET", "/api/tags", headers=headers)
        assert (reply.status, reply.json()["code"]) == (401, "invalid_api_key"), reply.body
        assert isinstance(reply.json()["error"], str) and reply.headers["www-authenticate"] == "Bearer"
    assert keyed.request("GET", "/api/tags", headers=auth()).status == 200
    assert keyed.request("GET", "/api/version", headers={"x-api-key": KEY}).status == 200
    client = ollama.Client(host=keyed.base_url, headers=auth())
    assert [m.model for m in client.list().models] == ["org/tiny"]
    with pytest.raises(ollama.ResponseError) as info:
        ollama.Client(host=keyed.base_url).list()
    assert info.value.status_code == 401 and "API key" in info.value.error


def test_front_door_refusals_have_ollamas_shape(keyed: Gateway) -> None:
    """Host, Origin, size and path refusals under /api/ are {"error": str, "code"} with the usual statuses."""
    cases = [
        (keyed.request("GET", "/api/tags", headers=auth(Host="evil.example")), 403, "forbidden_host"),
        (keyed.request("GET", "/api/tags", headers=auth(Origin="https://evil.example")), 403, "forbidden_origin"),
        (keyed.request("POST", "/api/chat", raw=b"x" * (1024 * 1024 + 1), headers=auth()), 413, "body_too_large"),
        (keyed.request("POST", "/api/nothing", {}, headers=auth()), 404, "not_found"),
        (keyed.request("PUT", "/api/chat", {}, headers=auth()), 405, "method_not_allowed"),
        (keyed.request("POST", "/api/chat", raw=b"{nope", headers=auth()), 400, "invalid_json"),
    ]
    for reply, status, code in cases:
        doc = reply.json()
        assert (reply.status, doc["code"], isinstance(doc["error"], str)) == (status, code, True), reply.body


def test_think_asked_of_a_model_without_thinking_is_refused_as_ollama_does(keyed: Gateway) -> None:
    """A think of true or an effort, to a model without reasoning, is 400 model_not_thinking; false passes."""
    for think in (True, "high"):
        for path, body in (("/api/chat", {"messages": HI}), ("/api/generate", {"prompt": "hi"})):
            reply = keyed.request("POST", path, {"model": "org/tiny", "think": think, **body}, headers=auth())
            doc = reply.json()
            assert (reply.status, doc["code"]) == (400, "model_not_thinking"), reply.body
            assert "does not support thinking" in doc["error"]
    plain = {"model": "org/tiny", "messages": HI, "think": False, "stream": False}
    assert keyed.request("POST", "/api/chat", plain, headers=auth()).status == 200


def test_every_ollama_endpoint_without_a_model_is_missing_parameter(keyed: Gateway) -> None:
    """Chat, generate, show, embed and embeddings without ``model`` are 400 missing_parameter, as documented."""
    for path, body in [
        ("/api/chat", {"messages": HI}),
        ("/api/generate", {"prompt": "hi"}),
        ("/api/show", {}),
        ("/api/embed", {"input": "hi"}),
        ("/api/embeddings", {"prompt": "hi"}),
    ]:
        reply = keyed.request("POST", path, body, headers=auth())
        doc = reply.json()
        assert (reply.status, doc["code"], isinstance(doc["error"], str)) == (400, "missing_parameter", True), path


def test_model_management_is_refused_clearly(keyed: Gateway) -> None:
    """Pull, push, create, copy, delete and blobs are 501 model_management_unsupported; nothing is loaded."""
    for method, path in MANAGEMENT:
        reply = keyed.request(method, path, {"model": "llama3"} if method != "HEAD" else None, headers=auth())
        assert reply.status == 501, (method, path)
        if method != "HEAD":
            assert reply.json()["code"] == "model_management_unsupported"
            assert "never downloads" in reply.json()["error"]
    with pytest.raises(ollama.ResponseError) as info:
        ollama.Client(host=keyed.base_url, headers=auth()).pull("llama3")
    assert info.value.status_code == 501


def test_a_chat_streams_ndjson_by_default_and_answers_once_with_stream_false(keyed: Gateway) -> None:
    """No stream field is an NDJSON stream; stream false is one object with the same fields."""
    streamed = keyed.request("POST", "/api/chat", {"model": "org/tiny:latest", "messages": HI}, headers=auth())
    assert streamed.status == 200 and streamed.headers["content-type"].startswith("application/x-ndjson")
    parts = lines(streamed.body)
    assert "".join(p["message"]["content"] for p in parts) == "Hello from the stand-in"
    assert [p["done"] for p in parts] == [False, False, False, True]
    assert (parts[-1]["prompt_eval_count"], parts[-1]["eval_count"], parts[-1]["model"]) == (11, 3, "org/tiny:latest")
    single = keyed.request("POST", "/api/chat", {"model": "org/tiny", "messages": HI, "stream": False}, headers=auth())
    doc = single.json()
    assert doc["message"] == {"role": "assistant", "content": "Hello from the stand-in"}
    assert set(parts[-1]) == set(doc)
    sent = [json.loads(line) for line in (keyed.worker_log.parent.parent / "bodies.jsonl").read_text().splitlines()]
    assert sent[-1]["model"] == "default_model" and sent[-1]["stream"] is True


def test_streamed_tool_call_fragments_reach_the_client_whole(keyed: Gateway) -> None:
    """The stand-in streams the arguments in pieces; the client gets one call with an object."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = {"model": "org/tiny", "messages": HI, "tools": tools}
    parts = lines(keyed.request("POST", "/api/chat", body, headers=auth()).body)
    calls = [c for p in parts for c in p["message"].get("tool_calls", [])]
    assert calls == [
        {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}, "id": "call_stand_in_1"}
    ]


def test_a_stream_that_breaks_off_ends_with_an_error_line_and_a_single_reply_with_502(keyed: Gateway) -> None:
    """A worker that hangs up mid-answer: the stream's last line is {"error"}; stream false is 502 worker_failed."""
    broken = [{"role": "user", "content": "break"}]
    parts = lines(keyed.request("POST", "/api/chat", {"model": "org/tiny", "messages": broken}, headers=auth()).body)
    assert parts[0]["message"]["content"] == "Hello" and set(parts[-1]) == {"error"}
    single = keyed.request(
        "POST", "/api/generate", {"model": "org/tiny", "prompt": "break", "stream": False}, headers=auth()
    )
    assert (single.status, single.json()["code"]) == (502, "worker_failed")


def test_each_ollama_request_has_its_request_line(keyed: Gateway) -> None:
    """The front's log has a request line per /api/ request, with its endpoint, status, stream and tokens."""
    keyed.request("POST", "/api/generate", {"model": "org/tiny", "prompt": "hi", "stream": False}, headers=auth())
    found = [
        json.loads(line.split("request ", 1)[1])
        for line in keyed.log_path.read_text().splitlines()
        if "mlx-agent front: request {" in line
    ]
    generate = [f for f in found if f["endpoint"] == "/api/generate" and f["status"] == 200][-1]
    assert (generate["model"], generate["stream"], generate["prompt_tokens"], generate["completion_tokens"]) == (
        "org/tiny",
        False,
        11,
        3,
    )


def test_keep_alive_zero_unloads_and_the_policy_keeps_a_kept_model(tmp_path: Path) -> None:
    """keep_alive 0 unloads after the request; with keep_loaded in the policy the same request leaves it loaded."""
    env = {"STAND_IN_LOG": str(tmp_path / "bodies.jsonl"), "STAND_IN_RELEASE": str(tmp_path / "release")}
    body = {"model": "org/tiny", "prompt": "hi", "stream": False, "keep_alive": 0}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running_gateway(tmp_path / "a", chat_stand_in_argv(tmp_path), env=env) as gateway:
        assert gateway.request("POST", "/api/generate", body).status == 200
        assert gateway.wait_state("unloaded")["model_state"] == "unloaded"
        assert gateway.request("GET", "/api/ps").json() == {"models": []}
        loaded = gateway.request("POST", "/api/generate", {**body, "keep_alive": "5m", "prompt": ""}).json()
        assert loaded["done_reason"] == "load" and gateway.status()["model_state"] == "loaded"
        ps = gateway.request("GET", "/api/ps").json()["models"]
        assert [m["name"] for m in ps] == ["org/tiny"] and ps[0]["size"] > 0
        assert ps[0]["expires_at"] != "9999-12-31T23:59:59Z"
    kept = {"idle_timeout": 0, "keep_loaded": True}
    with running_gateway(tmp_path / "b", chat_stand_in_argv(tmp_path), env=env, policy=kept) as gateway:
        assert gateway.request("POST", "/api/generate", body).status == 200
        assert gateway.wait_state("unloaded", timeout=2)["model_state"] == "loaded"  # a wait for what must not come
        assert gateway.request("GET", "/api/ps").json()["models"][0]["expires_at"] == "9999-12-31T23:59:59Z"
