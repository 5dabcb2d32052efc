"""Reply limits: no small default where the plan sets none, and a lowered limit said in the header, line and body.

The stand-in worker cuts a ``max_tokens`` above ``FAKE_ROOM`` (the room its context leaves) and says so in its
head, as the wrapped worker does (tests/e2e/test_lowered_limits_real.py checks that one).
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

from mlx_agent.gateway.observe.limit_notice import LOWERED_HEADER
from tests.gateway_support import Gateway, read_sse, request_lines, running_gateway

ANTHROPIC = {"anthropic-version": "2023-06-01"}
HI = [{"role": "user", "content": "hi"}]


def stream(gateway: Gateway, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[str | None, bytes]:
    """POST a streamed request; return its lowered-limit header and its body."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=60)
    try:
        payload = json.dumps({"model": "org/tiny", "stream": True, **body})
        conn.request("POST", path, body=payload, headers={"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        assert resp.status == 200
        return resp.getheader(LOWERED_HEADER), resp.read()
    finally:
        conn.close()


def test_without_a_planned_default_a_request_with_no_limit_gets_the_ceiling(tmp_path: Path) -> None:
    """No --max-tokens in the plan: no limit asked is the context window (else the ceiling); a planned one stays."""
    with running_gateway(tmp_path, max_tokens=None, context_window=8192) as gateway:
        reply = gateway.chat()
        assert reply.json()["echo"]["max_tokens"] == 8192 and LOWERED_HEADER not in reply.headers
        assert request_lines(gateway)[-1]["max_tokens"] == 8192
        assert request_lines(gateway)[-1]["max_tokens_requested"] is None
    with running_gateway(tmp_path, max_tokens=None, max_tokens_ceiling=3000, context_window=8192) as gateway:
        assert gateway.chat().json()["echo"]["max_tokens"] == 3000
    with running_gateway(tmp_path, max_tokens=512, context_window=8192) as gateway:
        assert gateway.chat().json()["echo"]["max_tokens"] == 512  # an explicit --max-tokens stays the default


def test_a_limit_lowered_by_the_front_or_the_worker_is_said_on_every_api(tmp_path: Path) -> None:
    """32000 cut to the ceiling or to the window's room: a header and the request line say it, Responses' body too."""
    with running_gateway(tmp_path, max_tokens=None, max_tokens_ceiling=4096) as gateway:
        reply = gateway.chat(max_tokens=32000)
        assert reply.json()["echo"]["max_tokens"] == 4096
        assert reply.headers[LOWERED_HEADER] == "32000->4096"
        line = request_lines(gateway)[-1]
        assert (line["max_tokens_requested"], line["max_tokens"]) == (32000, 4096)
        kept = gateway.chat(max_tokens=100)
        assert LOWERED_HEADER not in kept.headers and kept.json()["echo"]["max_tokens"] == 100
    with running_gateway(tmp_path, max_tokens=None, env={"FAKE_ROOM": "1500"}) as gateway:
        assert gateway.chat(max_tokens=32000).headers[LOWERED_HEADER] == "32000->1500"
        assert LOWERED_HEADER not in gateway.chat().headers  # no limit of its own: nothing of its was lowered
        messages = {"model": "org/tiny", "max_tokens": 32000, "messages": HI}
        plain = gateway.request("POST", "/v1/messages", messages, headers=ANTHROPIC)
        assert plain.status == 200 and plain.headers[LOWERED_HEADER] == "32000->1500"
        header, raw = stream(gateway, "/v1/messages", {"max_tokens": 32000, "messages": HI}, ANTHROPIC)
        assert header == "32000->1500" and read_sse(raw)[-1][0] == "message_stop"
        responses = {"model": "org/tiny", "input": "hi", "max_output_tokens": 32000}
        answered = gateway.request("POST", "/v1/responses", responses)
        assert answered.headers[LOWERED_HEADER] == "32000->1500"
        assert answered.json()["max_output_tokens"] == 1500
        header, raw = stream(gateway, "/v1/responses", {"input": "hi", "max_output_tokens": 32000}, {})
        final = read_sse(raw)[-1]
        assert header == "32000->1500" and final[0] == "response.completed"
        assert final[1]["response"]["max_output_tokens"] == 1500
        header, raw = stream(gateway, "/v1/chat/completions", {"messages": HI, "max_tokens": 32000}, {})
        assert header == "32000->1500"
        lines = request_lines(gateway)
        assert [(line["max_tokens_requested"], line["max_tokens"]) for line in lines[-1:]] == [(32000, 1500)]
        assert all(line["max_tokens"] == 1500 for line in lines if line["max_tokens_requested"] == 32000)
