"""The NDJSON translator of the Ollama API: fixed worker chunks in, the exact lines out (golden, pure)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from mlx_agent.gateway.ollama.stream import OllamaStream, reply

pytestmark = pytest.mark.fast

USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}
WALL = 1_800_000_000.0  # 2027-01-15T08:00:00Z
CREATED = "2027-01-15T08:00:00.000Z"


def ticks(*values: int) -> Iterator[int]:
    """Yield the translator's clock readings in order (nanoseconds)."""
    yield from values


def translator(kind: str, *, clock: list[int], load: int = 0, collect: bool = False) -> OllamaStream:
    """Return a translator whose clock reads ``clock`` in order, arrived at 1000 ns."""
    readings = ticks(*clock)
    return OllamaStream(
        kind,
        "tiny:latest",
        arrived_ns=1000,
        load_ns=lambda: load,
        collect=collect,
        clock=lambda: next(readings),
        wall=lambda: WALL,
    )


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, usage: Any = None) -> bytes:
    """Return one worker chat-completion chunk as its data payload."""
    doc: dict[str, Any] = {"object": "chat.completion.chunk", "choices": []}
    if delta is not None or finish is not None:
        doc["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        doc["usage"] = usage
    return json.dumps(doc).encode()


def run(stream: OllamaStream, payloads: list[bytes]) -> bytes:
    """Drive the translator as the pump does: opening, each payload, a keep-alive, the end."""
    out = stream.start()
    for payload in payloads:
        out += stream.data(payload)
        out += stream.keepalive(b": keepalive")
    return out + stream.finish()


def test_a_chat_stream_is_one_json_line_per_piece_then_the_done_line() -> None:
    """Reasoning and content become message lines; the last line has the counts and durations in ns."""
    stream = translator("chat", clock=[5000, 9000], load=1500)
    body = run(
        stream,
        [
            chunk({"role": "assistant", "reasoning": "Hmm"}),
            chunk({"content": "Hi"}),
            chunk({}, "stop"),
            chunk(usage=USAGE),
        ],
    )
    assert body == (
        b'{"model":"tiny:latest","created_at":"' + CREATED.encode() + b'","message":{"role":"assistant",'
        b'"content":"","thinking":"Hmm"},"done":false}\n'
        b'{"model":"tiny:latest","created_at":"' + CREATED.encode() + b'","message":{"role":"assistant",'
        b'"content":"Hi"},"done":false}\n'
        b'{"model":"tiny:latest","created_at":"' + CREATED.encode() + b'","message":{"role":"assistant",'
        b'"content":""},"done":true,"done_reason":"stop","total_duration":8000,"load_duration":1500,'
        b'"prompt_eval_count":11,"prompt_eval_duration":2500,"eval_count":3,"eval_duration":4000}\n'
    )


def test_a_generate_stream_writes_response_and_a_cut_reply_is_length() -> None:
    """Generate's pieces are ``response`` fields; a reply the limit cut ends with done_reason length."""
    stream = translator("generate", clock=[2000, 3000])
    body = run(stream, [chunk({"content": "Once"}), chunk({}, "length"), chunk(usage=USAGE)])
    lines = [json.loads(line) for line in body.splitlines()]
    assert lines[0] == {"model": "tiny:latest", "created_at": CREATED, "response": "Once", "done": False}
    assert {k: lines[1][k] for k in ("response", "done", "done_reason", "total_duration", "eval_duration")} == {
        "response": "",
        "done": True,
        "done_reason": "length",
        "total_duration": 2000,
        "eval_duration": 1000,
    }


def test_tool_call_fragments_come_whole_in_one_line_with_object_arguments() -> None:
    """The worker's streamed argument fragments are joined and parsed: Ollama sends each call once, whole."""
    stream = translator("chat", clock=[2000, 4000])
    body = run(
        stream,
        [
            chunk({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "get_weather", "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            chunk({}, "tool_calls"),
        ],
    )
    first, last = (json.loads(line) for line in body.splitlines())
    assert first["message"] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}, "id": "call_1"}
        ],
    }
    assert (last["done"], last["done_reason"], last["eval_count"]) == (True, "stop", 0)


def test_a_call_whose_arguments_are_not_an_object_is_returned_as_text() -> None:
    """Ollama's tool call holds an object: arguments the model botched reach the client as its text instead."""
    stream = translator("chat", clock=[2000, 4000])
    body = run(stream, [chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "[1"}}]})])
    first = json.loads(body.splitlines()[0])
    assert "tool_calls" not in first["message"]
    assert json.loads(first["message"]["content"]) == {"name": "f", "arguments": "[1"}


def test_a_broken_stream_ends_with_an_error_line_and_keepalives_write_nothing() -> None:
    """NDJSON has no comment: a keep-alive is no bytes; a failure is one {"error"} line that Ollama's clients raise."""
    stream = translator("chat", clock=[2000])
    assert stream.start() == b"" and stream.keepalive(b": keepalive") == b""
    stream.data(chunk({"content": "Hi"}))
    assert stream.data(b'{"error": {"message": "generation died"}}') == b'{"error": "generation died"}\n'
    assert stream.ended


def test_a_collected_stream_folds_into_the_non_streamed_reply() -> None:
    """stream: false gets the last line with the whole message folded in, thinking and tool calls included."""
    stream = translator("chat", clock=[2000, 3000, 4000], collect=True)
    out = run(
        stream,
        [
            chunk({"reasoning": "Hm"}),
            chunk({"content": "Sun"}),
            chunk({"content": "ny"}),
            chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}),
            chunk({}, "stop"),
            chunk(usage=USAGE),
        ],
    )
    assert out == b""
    folded = reply(stream.kept)
    assert folded["message"] == {
        "role": "assistant",
        "content": "Sunny",
        "thinking": "Hm",
        "tool_calls": [{"function": {"index": 0, "name": "f", "arguments": {}}}],
    }
    assert (folded["done"], folded["prompt_eval_count"], folded["eval_count"]) == (True, 11, 3)


def test_a_collected_generate_folds_response_and_thinking() -> None:
    """A non-streamed generate reply has the whole response and thinking text."""
    stream = translator("generate", clock=[2000, 3000, 4000], collect=True)
    run(stream, [chunk({"reasoning": "a"}), chunk({"content": "b"}), chunk({"content": "c"}), chunk({}, "stop")])
    folded = reply(stream.kept)
    assert (folded["response"], folded["thinking"], folded["done_reason"]) == ("bc", "a", "stop")


def test_a_raw_generate_reads_text_completion_chunks() -> None:
    """A text completion's choices[0].text is a response piece like a chat delta's content."""
    stream = translator("generate", clock=[2000, 3000])
    text_chunk = json.dumps({"choices": [{"index": 0, "text": "Once", "finish_reason": None}]}).encode()
    end_chunk = json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}).encode()
    lines = [json.loads(line) for line in run(stream, [text_chunk, end_chunk]).splitlines()]
    assert [line["response"] for line in lines] == ["Once", ""]
    assert lines[-1]["done_reason"] == "length"
