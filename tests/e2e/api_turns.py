"""One turn on each chat API (chat, Messages, Responses) through a front, read back as its usage reports it."""

from __future__ import annotations

import json
from typing import Any

from tests.gateway_support import Gateway

APIS = ["chat", "messages", "responses"]
FINISHED = ("response.completed", "response.incomplete")  # a reply cut at max_output_tokens is incomplete


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
