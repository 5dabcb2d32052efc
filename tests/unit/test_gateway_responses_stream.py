"""OpenAI Responses streams: golden event sequences translated from canned worker chunks (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.responses.bodies import ResponsesBody
from mlx_agent.gateway.responses.output import base_response
from mlx_agent.gateway.responses.request import to_chat
from mlx_agent.gateway.responses.stream import ResponsesStream
from mlx_agent.gateway.sse import KEEPALIVE_S
from mlx_agent.gateway.tools import responses_tools
from tests.gateway_support import read_sse

pytestmark = pytest.mark.fast


def sequence_ids() -> Any:
    """Return an id maker that counts: ``msg_1``, ``fc_2``, ..."""
    counter = iter(range(1, 1000))
    return lambda prefix: f"{prefix}_{next(counter)}"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    """Return a chat-completion chunk with one choice."""
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


USAGE = {
    "choices": [],
    "usage": {"prompt_tokens": 20, "completion_tokens": 6, "prompt_tokens_details": {"cached_tokens": 8}},
}


def run(chunks: list[dict[str, Any]], *, done: bool = True) -> tuple[list[tuple[str | None, Any]], dict[str, Any]]:
    """Drive a translator over ``chunks``; return the parsed events and the final Response it handed over.

    A keepalive follows the start at once (a comment) and again ``KEEPALIVE_S`` later (a repeated
    ``response.in_progress``, checked here and left out of what is returned).
    """
    finals: list[dict[str, Any]] = []
    base = base_response(
        to_chat(parse(ResponsesBody, {"model": "org/tiny", "input": "Hi"}), default_model="org/tiny"), "resp_0", 1
    )
    now = [0.0]
    stream = ResponsesStream(base, finals.append, sequence_ids(), clock=lambda: now[0])
    out = [stream.start(), stream.keepalive(b": keepalive 1/1")]
    assert out[-1] == b": keepalive\n\n"  # an event went out just now
    now[0] += KEEPALIVE_S
    out.append(stream.keepalive(b": keepalive"))
    out.extend(stream.chunk(doc) for doc in chunks)
    out.append(stream.finish() if done else stream.fail("the model worker's stream broke"))
    assert stream.ended and len(finals) == 1
    events = read_sse(b"".join(out))
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(name == data["type"] for name, data in events)
    assert [name for name, _ in events[:3]] == ["response.created", "response.in_progress", "response.in_progress"]
    assert events[2][1]["response"]["id"] == "resp_0" and events[2][1]["response"]["output"] == []
    del events[2]
    return events, finals[0]


def strip(events: list[tuple[str | None, Any]]) -> list[dict[str, Any]]:
    """Return the events' data without the sequence numbers and the (large) response objects."""
    out = []
    for _, data in events:
        data = {k: v for k, v in data.items() if k != "sequence_number"}
        if "response" in data:
            data["response"] = data["response"]["status"]
        out.append(data)
    return out


def test_golden_stream_of_text_then_a_fragmented_function_call() -> None:
    """Text arrives as output_text deltas, the call as argument deltas; each item closes before the next opens."""
    events, final = run(
        [
            chunk({"role": "assistant", "content": "Let me "}),
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
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    done_part = {**part, "text": "Let me check."}
    message = {"id": "msg_1", "type": "message", "role": "assistant"}
    call = {"id": "fc_2", "type": "function_call", "call_id": "call_1", "name": "get_weather"}
    assert strip(events) == [
        {"type": "response.created", "response": "in_progress"},
        {"type": "response.in_progress", "response": "in_progress"},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**message, "status": "in_progress", "content": []},
        },
        {
            "type": "response.content_part.added",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "part": part,
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "Let me ",
            "logprobs": [],
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": "check.",
            "logprobs": [],
        },
        {
            "type": "response.output_text.done",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "text": "Let me check.",
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "part": done_part,
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**message, "status": "completed", "content": [done_part]},
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {**call, "status": "in_progress", "arguments": ""},
        },
        {"type": "response.function_call_arguments.delta", "item_id": "fc_2", "output_index": 1, "delta": '{"city": '},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_2", "output_index": 1, "delta": '"Paris"}'},
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_2",
            "output_index": 1,
            "arguments": '{"city": "Paris"}',
        },
        {
            "type": "response.output_item.done",
            "output_index": 1,
            "item": {**call, "status": "completed", "arguments": '{"city": "Paris"}'},
        },
        {"type": "response.completed", "response": "completed"},
    ]
    assert final == events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["usage"]["input_tokens"] == 20 and final["usage"]["input_tokens_details"]["cached_tokens"] == 8


def test_reasoning_and_client_named_calls_stream_as_their_items() -> None:
    """Reasoning streams as a reasoning item; calls come back named as the client's namespaced or custom tools."""
    tools = responses_tools(
        [
            {"type": "namespace", "name": "agents", "tools": [{"type": "function", "name": "spawn", "parameters": {}}]},
            {"type": "custom", "name": "apply_patch"},
        ]
    )
    finals: list[dict[str, Any]] = []
    base = base_response(
        to_chat(parse(ResponsesBody, {"model": "org/tiny", "input": "Hi"}), default_model="org/tiny"), "resp_0", 1
    )
    stream = ResponsesStream(base, finals.append, sequence_ids(), tools=tools)
    calls = [
        {"index": 0, "id": "c1", "function": {"name": "agents__spawn", "arguments": "{}"}},
        {"index": 1, "id": "c2", "function": {"name": "apply_patch", "arguments": '{"input": "*** Begin"}'}},
    ]
    body = stream.start() + stream.chunk(chunk({"reasoning": "Think "})) + stream.chunk(chunk({"reasoning": "more."}))
    body += stream.chunk(chunk({"tool_calls": calls})) + stream.chunk(chunk(finish="tool_calls")) + stream.finish()
    kinds = [data["type"] for _, data in read_sse(body)]
    assert kinds[2:7] == [
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_item.done",
    ]
    assert "response.custom_tool_call_input.done" in kinds
    output = finals[0]["output"]
    assert output[0] == {
        "id": "rs_1",
        "type": "reasoning",
        "status": "completed",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Think more."}],
    }
    assert {k: output[1][k] for k in ("type", "name", "namespace", "arguments")} == {
        "type": "function_call",
        "name": "spawn",
        "namespace": "agents",
        "arguments": "{}",
    }
    assert {k: output[2][k] for k in ("type", "name", "input", "call_id")} == {
        "type": "custom_tool_call",
        "name": "apply_patch",
        "input": "*** Begin",
        "call_id": "c2",
    }


def test_a_cut_answer_ends_incomplete() -> None:
    """finish_reason length ends with response.incomplete, its message item incomplete."""
    events, final = run([chunk({"content": "Once"}), chunk(finish="length"), USAGE])
    assert events[-1][0] == "response.incomplete"
    assert events[-2][1]["item"]["status"] == "incomplete"
    assert (final["status"], final["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})


def test_a_broken_stream_ends_failed() -> None:
    """Without [DONE] the open item is closed and response.failed carries the error."""
    events, final = run([chunk({"content": "Once"})], done=False)
    assert events[-1][0] == "response.failed"
    assert final["status"] == "failed"
    assert final["error"] == {"code": "server_error", "message": "the model worker's stream broke"}


def test_whole_calls_in_one_delta_become_separate_items() -> None:
    """Two calls in one delta (as mlx_lm sends them) are two function_call items; a missing call id is made."""
    _, final = run(
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
    assert [(item["call_id"], item["name"], item["arguments"]) for item in final["output"]] == [
        ("a", "f", "{}"),
        ("call_3", "g", '{"x": 1}'),
    ]
