"""Anthropic Messages streams: golden event sequences translated from canned worker chunks (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlx_agent.gateway.anthropic.stream import PING_EVERY_S, AnthropicStream
from tests.gateway_support import read_sse

pytestmark = pytest.mark.fast


def sequence_ids() -> Any:
    """Return an id maker that counts: ``msg_1``, ``toolu_2``, ..."""
    counter = iter(range(1, 1000))
    return lambda prefix: f"{prefix}_{next(counter)}"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    """Return a chat-completion chunk with one choice."""
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


USAGE = {
    "object": "chat.completion",
    "choices": [],
    "usage": {
        "prompt_tokens": 20,
        "completion_tokens": 6,
        "total_tokens": 26,
        "prompt_tokens_details": {"cached_tokens": 8},
    },
}


def run(chunks: list[dict[str, Any]], *, done: bool = True) -> list[tuple[str | None, Any]]:
    """Drive a translator over ``chunks`` (and a keepalive, a ping's interval later, after the first) and parse it."""
    ticks = iter(range(0, 10**6, int(PING_EVERY_S)))
    stream = AnthropicStream("org/tiny", sequence_ids(), clock=lambda: float(next(ticks)))
    out = [stream.start()]
    for index, doc in enumerate(chunks):
        out.append(stream.chunk(doc))
        if index == 0:
            out.append(stream.keepalive(b": keepalive"))
    out.append(stream.finish() if done else stream.fail("the model worker ended the stream before it was complete"))
    assert stream.ended
    return read_sse(b"".join(out))


def test_golden_stream_of_thinking_text_and_a_fragmented_tool_call() -> None:
    """Blocks open and close in order, tool arguments arrive as input_json_delta, usage closes the message."""
    events = run(
        [
            chunk({"role": "assistant", "reasoning": "Hmm, "}),
            chunk({"reasoning": "weather."}),
            chunk({"content": "Let me "}),
            chunk({"content": "check."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            chunk(finish="tool_calls"),
            USAGE,
        ]
    )
    zero = {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0}
    assert events == [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "org/tiny",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": zero,
                },
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            },
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm, "}},
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "weather."}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me "}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "check."}},
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 1}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '{"city": '},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 2}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {
                    "input_tokens": 12,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 8,
                    "output_tokens": 6,
                },
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def test_mlx_lm_style_whole_tool_calls_get_generated_ids() -> None:
    """Two calls in one delta (as mlx_lm sends them) become two tool_use blocks; a missing id is generated."""
    events = run(
        [
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}},
                        {"index": 1, "function": {"name": "g", "arguments": '{"x": 1}'}},
                    ]
                },
                finish="tool_calls",
            ),
            USAGE,
        ]
    )
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert starts == [
        {"type": "tool_use", "id": "a", "name": "f", "input": {}},
        {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}},
    ]
    assert [data["index"] for name, data in events if name == "content_block_stop"] == [0, 1]


def test_a_cut_answer_stops_for_max_tokens() -> None:
    """finish_reason length is stop_reason max_tokens; a stream with no content has no blocks."""
    events = run([chunk({"content": "Once"}), chunk(finish="length"), USAGE])
    assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
    empty = run([chunk(finish="stop")])
    assert [name for name, _ in empty] == ["message_start", "ping", "ping", "message_delta", "message_stop"]
    assert empty[-2][1]["delta"]["stop_reason"] == "end_turn"


def test_a_broken_stream_ends_with_an_error_event() -> None:
    """Without [DONE] the stream ends with Anthropic's error event and no message_stop."""
    events = run([chunk({"content": "Once"})], done=False)
    assert [name for name, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "ping",
        "error",
    ]
    assert events[-1][1] == {
        "type": "error",
        "error": {"type": "api_error", "message": "the model worker ended the stream before it was complete"},
    }


def test_events_are_one_compact_json_line_each() -> None:
    """Every event is an event: line and one data: line, so any SSE parser reads it."""
    stream = AnthropicStream("m")
    raw = stream.start() + stream.chunk(chunk({"content": "a\nb"})) + stream.finish()
    for block in raw.decode().split("\n\n")[:-1]:
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        assert json.loads(data[6:])["type"] == name[7:]


def test_keepalives_are_pings_a_ping_interval_apart_and_comments_between() -> None:
    """A keepalive is a ping only when none went out for PING_EVERY_S; the ones between are SSE comments."""
    now = [0.0]
    stream = AnthropicStream("m", clock=lambda: now[0])
    opening = read_sse(stream.start())
    assert [name for name, _ in opening] == ["message_start", "ping"]
    written = []
    for _ in range(int(PING_EVERY_S) // 2 + 1):  # one keepalive every 2 s for a ping's interval
        now[0] += 2.0
        written.append(stream.keepalive(b": keepalive 2048/90000"))
    pings = [raw for raw in written if read_sse(raw)]
    assert len(pings) == 1 and read_sse(pings[0]) == [("ping", {"type": "ping"})]
    assert written.index(pings[0]) == int(PING_EVERY_S) // 2 - 1  # the first keepalive PING_EVERY_S after start
    assert all(raw.startswith(b":") and raw.endswith(b"\n\n") for raw in written if raw is not pings[0])
