"""A slow prefill does not look dead: streams show bytes early and keep showing them; plain replies wait it out.

The stand-in worker is made slow in the test (``FAKE_PREFILL``: seconds before the head of every answer),
never in the product. The client here is a real HTTP client with a read timeout of ``CLIENT_IDLE_S``, which
is how an agent notices a dead server: a read that times out fails the test.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.gateway.sse import KEEPALIVE_S
from tests.gateway_support import Gateway, read_sse, running_gateway
from tests.standin_fronts import settled

CLIENT_IDLE_S = 5.0  # the bound on the wait for a stream's first bytes, and between any two
PREFILL_S = 4 * KEEPALIVE_S  # several keep-alive periods, and longer than the client waits for a byte
ANTHROPIC = {"anthropic-version": "2023-06-01"}
Endpoint = tuple[str, dict[str, Any], dict[str, str]]  # path, body, headers
STREAMS: dict[str, Endpoint] = {
    "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, {}),
    "messages": ("/v1/messages", {"max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}, ANTHROPIC),
    "responses": ("/v1/responses", {"input": "hi"}, {}),
}


def read_stream(gateway: Gateway, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes]:
    """POST a streamed request and read it to its end, each read allowed ``CLIENT_IDLE_S`` (else it raises)."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=CLIENT_IDLE_S)
    try:
        payload = json.dumps({"model": "org/tiny", "stream": True, **body})
        conn.request("POST", path, body=payload, headers={"Content-Type": "application/json", **headers})
        resp = conn.getresponse()  # the head, within the client's idle timeout
        pieces = []
        while piece := resp.read1(65536):  # every read: bytes within the client's idle timeout
            pieces.append(piece)
        return resp.status, b"".join(pieces)
    finally:
        conn.close()


def keepalives(api: str, raw: bytes) -> int:
    """Count the front's own keep-alives in a stream: SSE comments, or Responses' repeated in_progress events."""
    if api == "responses":
        return [name for name, _ in read_sse(raw)].count("response.in_progress") - 1
    return raw.count(b": keepalive\n\n")


def ended_well(api: str, raw: bytes) -> bool:
    """Say whether a stream ended as its API ends a complete answer."""
    events = read_sse(raw)
    if api == "chat":
        return events[-1] == (None, "[DONE]") and "t0 " in raw.decode()
    if api == "messages":
        return [name for name, _ in events][-2:] == ["message_delta", "message_stop"]
    return events[-1][0] == "response.completed"


@pytest.fixture(scope="module")
def slow_prefill_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run one front over the stand-in worker slowed by a prefill of ``PREFILL_S`` for the module's tests."""
    directory = tmp_path_factory.mktemp("slow-prefill")
    with running_gateway(directory, env={"FAKE_PREFILL": str(PREFILL_S)}) as gateway:
        yield gateway


@pytest.fixture
def slow_prefill(slow_prefill_front: Gateway) -> Iterator[Gateway]:
    """Return the slow front settled, its model unloaded; after the test, check that it settles again."""
    yield settled(slow_prefill_front)
    settled(slow_prefill_front)


def test_streams_show_bytes_early_and_often_through_a_slow_prefill_on_every_api(slow_prefill: Gateway) -> None:
    """With a prefill longer than the client's idle timeout, every API's stream shows bytes in time and completes."""
    gateway = slow_prefill  # this module's slow front
    with ThreadPoolExecutor(len(STREAMS)) as pool:
        replies = {api: pool.submit(read_stream, gateway, *STREAMS[api]) for api in STREAMS}
        for api, future in replies.items():
            status, raw = future.result()
            assert status == 200, (api, raw)
            assert keepalives(api, raw) >= 1, (api, raw)  # the front's own, during the prefill
            assert ended_well(api, raw), (api, raw)
    opening = read_sse(read_stream(gateway, *STREAMS["messages"])[1])
    assert [name for name, _ in opening][:2] == ["message_start", "ping"]  # Anthropic's own start, early


def test_a_stream_silent_between_tokens_gets_keepalives(standin: Gateway) -> None:
    """A worker that goes quiet after its first bytes (a slow prefill chunk) is covered by the front's keep-alives."""
    gateway = standin  # the shared front
    path, body, headers = STREAMS["chat"]
    status, raw = read_stream(gateway, path, {**body, "x_chunks": 2, "x_delay": PREFILL_S}, headers)
    assert status == 200 and ended_well("chat", raw)
    assert raw.count(b": keepalive\n\n") >= 2  # beside the worker's own ": keepalive 1/1"


def test_refusals_keep_their_status_when_quick_and_end_the_stream_when_late(
    standin: Gateway, slow_prefill: Gateway
) -> None:
    """A worker's refusal before the head is its HTTP status; one after the early head is the stream's error event."""
    path, body, headers = STREAMS["chat"]
    quick_status, quick = read_stream(standin, path, {**body, "x_status": 400}, headers)  # the shared front
    assert quick_status == 400 and json.loads(quick)["error"]["message"] == "stand-in error"
    late_status, late = read_stream(slow_prefill, path, {**body, "x_status": 400}, headers)  # the module's slow one
    assert late_status == 200
    assert read_sse(late)[-1][1]["error"]["message"] == "stand-in error"


def test_plain_replies_slower_than_every_front_timeout_are_answered(tmp_path: Path) -> None:
    """Non-streamed requests whose answer takes longer than the front's header, keep-alive and connect timeouts."""
    slow = 11.0  # past the worker connect timeout (10 s) and the header and keep-alive timeouts set below
    with running_gateway(
        tmp_path, header_timeout=1.0, keepalive_timeout=1.0, env={"FAKE_PREFILL": str(slow)}
    ) as gateway:
        requests: dict[str, Endpoint] = {
            "chat": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, {}),
            "messages": (*STREAMS["messages"][:2], ANTHROPIC),
            "responses": STREAMS["responses"],
        }

        def ask(api: str) -> Any:
            path, body, headers = requests[api]
            return gateway.request("POST", path, {"model": "org/tiny", **body}, headers=headers, timeout=60)

        with ThreadPoolExecutor(len(requests)) as pool:
            replies = dict(zip(requests, pool.map(ask, requests), strict=True))
        assert {api: reply.status for api, reply in replies.items()} == dict.fromkeys(requests, 200)
        assert replies["chat"].json()["choices"][0]["message"]["content"] == "ok"
        assert replies["messages"].json()["content"] == [{"type": "text", "text": "ok"}]
        assert replies["responses"].json()["status"] == "completed"


def test_the_official_sdks_read_streams_with_early_heads_and_keepalives(slow_prefill: Gateway) -> None:
    """The OpenAI and Anthropic SDKs, with a read timeout shorter than the prefill, parse all three streams whole."""
    import anthropic
    import openai

    timeout = CLIENT_IDLE_S  # each read (the SDKs' timeout bounds every wait, not the whole stream)
    gateway = slow_prefill  # this module's slow front
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="local", timeout=timeout, max_retries=0)
    chunks = client.chat.completions.create(model="org/tiny", messages=[{"role": "user", "content": "hi"}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "t0 t1 t2 "
    events = list(client.responses.create(model="org/tiny", input="hi", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[-1].response.output_text == "t0 t1 t2 "
    claude = anthropic.Anthropic(base_url=gateway.base_url, api_key="local", timeout=timeout, max_retries=0)
    with claude.messages.stream(
        model="org/tiny", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        message = stream.get_final_message()
    assert [block.type for block in message.content] == ["text"] and message.stop_reason == "end_turn"
    client.close()  # their kept-alive connections: the shared front's next test finds none held
    claude.close()
