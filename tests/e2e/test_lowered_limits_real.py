"""The wrapped worker tells its front when the context's room cut a reply limit, and the front tells the client."""

from __future__ import annotations

import http.client
import json
from pathlib import Path

import pytest

from mlx_agent.gateway.observe.limit_notice import LOWERED_HEADER
from tests.gateway_support import real_worker_argv, request_lines, running_gateway

pytestmark = pytest.mark.e2e
WINDOW = 160


def test_a_limit_cut_to_the_windows_room_is_said_and_no_limit_gets_the_room(tmp_path: Path, tiny_model: Path) -> None:
    """32000 asked in a 160-token window: the reply is cut to the room, and the header says by how much."""
    argv = real_worker_argv(tiny_model, 16, context_window=WINDOW)
    with running_gateway(tmp_path, argv, model_path=tiny_model, max_tokens=None, context_window=WINDOW) as gateway:
        reply = gateway.chat("hello there", max_tokens=32000, temperature=0)
        assert reply.status == 200, reply.body
        usage = reply.json()["usage"]
        room = WINDOW - usage["prompt_tokens"]
        assert reply.headers[LOWERED_HEADER] == f"32000->{room}"
        assert usage["completion_tokens"] <= room
        line = request_lines(gateway)[-1]
        assert (line["max_tokens_requested"], line["max_tokens"]) == (32000, room)

        conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=120)
        body = {
            "model": "org/tiny",
            "stream": True,
            "max_tokens": 32000,
            "messages": [{"role": "user", "content": "hi"}],
        }
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        streamed = conn.getresponse()
        header, raw = streamed.getheader(LOWERED_HEADER), streamed.read()
        conn.close()
        assert streamed.status == 200 and raw.rstrip().endswith(b"data: [DONE]")
        assert header is not None and header.startswith("32000->") and int(header.split("->")[1]) < WINDOW

        unlimited = gateway.chat("hello there", temperature=0)  # no limit: the front sends the window, cut to room
        assert unlimited.status == 200 and LOWERED_HEADER not in unlimited.headers
        assert request_lines(gateway)[-1]["max_tokens"] == room
        assert request_lines(gateway)[-1]["max_tokens_requested"] is None
