"""End to end: an agent's next turn reads the previous turn's whole prompt from the worker's cache, on every API.

The shared front over the real wrapped worker on the tiny model (``tiny_front``). Each conversation sends a
first turn, then a second that repeats it with the reply, a late system message (a reminder) and a new user
message, at another temperature, then a third with other per-request template arguments; streamed and
non-streamed alike, through chat completions, Anthropic Messages and OpenAI Responses. Each later turn's cached
tokens must cover the whole prompt of the turn before, as ``usage`` reports it and as the front's metrics count
it (from where the shared front stands when the test begins).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.gateway_support import Gateway

pytestmark = pytest.mark.e2e

SYSTEM = "You work in a repository: read files, run commands and edit with care. " * 12
APIS = ["chat", "messages", "responses"]
FINISHED = ("response.completed", "response.incomplete")  # a reply cut at max_output_tokens is incomplete


@pytest.fixture
def front(tiny_front: Gateway) -> Gateway:
    """Return the shared front over the real worker on the tiny model (each test counts from where it stands)."""
    return tiny_front


def post(front: Gateway, path: str, body: dict[str, Any]) -> Any:
    """POST ``body``; return the JSON answer, or the list of SSE data documents of a stream."""
    reply = front.request("POST", path, body, {"anthropic-version": "2023-06-01"})
    raw = reply.body.decode()
    assert reply.status == 200, raw
    if not body.get("stream"):
        return json.loads(raw)
    return [
        json.loads(line[5:]) for line in raw.splitlines() if line.startswith("data:") and line[5:].strip() != "[DONE]"
    ]


def turn(front: Gateway, api: str, stream: bool, messages: list[dict[str, Any]], **extra: Any) -> tuple[int, int, str]:
    """Send one turn through ``api``; return (prompt tokens, cached tokens, reply text) as its usage reports."""
    system, rest = messages[0]["content"], messages[1:]
    if api == "chat":
        body: dict[str, Any] = {"model": "org/tiny", "messages": messages, "max_tokens": 4, "stream": stream, **extra}
        if stream:
            body["stream_options"] = {"include_usage": True}
        answer = post(front, "/v1/chat/completions", body)
        if stream:
            usage = next(c["usage"] for c in answer if c.get("usage"))
            text = "".join((c["choices"][0]["delta"].get("content") or "") for c in answer if c.get("choices"))
        else:
            usage, text = answer["usage"], answer["choices"][0]["message"]["content"] or ""
        return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"], text
    if api == "messages":
        body = {"model": "org/tiny", "system": system, "messages": rest, "max_tokens": 4, "stream": stream, **extra}
        answer = post(front, "/v1/messages", body)
        if stream:
            usage = [e["usage"] for e in answer if e.get("type") == "message_delta"][-1]
            text = "".join(e["delta"].get("text", "") for e in answer if e.get("type") == "content_block_delta")
        else:
            usage = answer["usage"]
            text = "".join(b.get("text", "") for b in answer["content"] if b["type"] == "text")
        cached = usage["cache_read_input_tokens"]
        return usage["input_tokens"] + cached, cached, text
    body = {
        "model": "org/tiny",
        "instructions": system,
        "input": rest,
        "max_output_tokens": 4,
        "stream": stream,
        **extra,
    }
    answer = post(front, "/v1/responses", body)
    response = [e["response"] for e in answer if e.get("type") in FINISHED][-1] if stream else answer
    usage = response["usage"]
    text = "".join(p.get("text", "") for i in response["output"] if i["type"] == "message" for p in i["content"])
    return usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"], text


def template_args(api: str) -> dict[str, Any]:
    """Return per-request template arguments as each API carries them."""
    if api == "chat":
        return {"chat_template_kwargs": {"enable_thinking": False}}
    if api == "messages":
        return {"thinking": {"type": "disabled"}}
    return {"reasoning": {"effort": "low"}}


def cached_metric(front: Gateway) -> float:
    """Return the front's count of prompt tokens read from the cache, for the served model."""
    text = front.request("GET", "/metrics").body.decode()
    found = re.findall(r'^mlx_agent_cached_prompt_tokens_total\{[^}]*model="org/tiny"[^}]*\} (\S+)$', text, re.M)
    return sum(float(value) for value in found)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("api", APIS)
def test_each_turn_reads_the_previous_prompt_from_the_cache(front: Gateway, api: str, stream: bool) -> None:
    """Turn 2 (reply, late reminder, new temperature) and turn 3 (template arguments) hit all of the prompt before."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"{api} {stream}. {SYSTEM}"},
        {"role": "user", "content": "Look at the repository and tell me what it does."},
    ]
    before = cached_metric(front)
    first, _, reply = turn(front, api, stream, messages, temperature=0)
    messages += [
        {"role": "assistant", "content": reply or "ok"},
        {"role": "system", "content": "Reminder: 9000 tokens left."},
        {"role": "user", "content": "Now read the tests."},
    ]
    second, cached, reply = turn(front, api, stream, messages, temperature=0.7)
    assert second > first and cached >= first, (first, second, cached)
    messages += [{"role": "assistant", "content": reply or "ok"}, {"role": "user", "content": "And the docs?"}]
    third, cached_third, _ = turn(front, api, not stream, messages, temperature=0, **template_args(api))
    assert third > second and cached_third >= second, (second, third, cached_third)
    assert cached_metric(front) - before >= cached + cached_third
