"""Tool calls through the wrapped server: one the parser cannot read is returned as text with a marker.

A random model never writes tool-call markup, so these models are scripted (see tool_call_models):
right after the generation prompt they write ``<tool_call>``, one fixed text, ``</tool_call>`` and stop. The
tokenizer names mlx_lm's ``json_tools`` parser. Bare mlx_lm.server logs a warning for a call it cannot parse
and answers an empty message (with ``finish_reason: "tool_calls"`` and no calls).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.tool_call_models import BROKEN, TOOLS, WHOLE, tool_caller
from tests.e2e.wrapped_support import Server, running, scripted_model

pytestmark = pytest.mark.e2e

ASK = {"messages": [{"role": "user", "content": "What time is it?"}], "tools": TOOLS, "max_tokens": 16}


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Serve the model whose tool call does not parse."""
    model = tool_caller(tmp_path_factory.mktemp("broken") / "model", BROKEN)
    with running(model, model.parent) as started:
        yield started


def test_an_unparsed_tool_call_comes_back_as_text_with_the_marker(broken: Server) -> None:
    """The call as written is in the content and in unparsed_tool_calls, with the parser's error."""
    status, answer = broken.post(ASK)
    assert status == 200, answer
    choice = answer["choices"][0]
    message = choice["message"]
    written = f"<tool_call>{BROKEN}</tool_call>"
    assert message["content"] == written
    [marker] = message["unparsed_tool_calls"]
    assert marker["text"] == written
    assert "JSONDecodeError" in marker["error"]
    assert "tool_calls" not in message
    assert choice["finish_reason"] == "stop"  # no call the client could run


def test_an_unparsed_tool_call_comes_back_in_a_stream(broken: Server) -> None:
    """Streamed, the call as written arrives as content, and its chunk carries the marker."""
    status, answer = broken.post({**ASK, "stream": True})
    assert status == 200
    chunks = [json.loads(line[len("data: ") :]) for line in answer.splitlines() if line.startswith("data: {")]
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    assert "".join(d.get("content", "") for d in deltas) == f"<tool_call>{BROKEN}</tool_call>"
    assert [m["text"] for d in deltas for m in d.get("unparsed_tool_calls", [])] == [f"<tool_call>{BROKEN}</tool_call>"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_truncated_tool_call_keeps_what_was_written(broken: Server) -> None:
    """A reply cut by max_tokens inside a call returns the call so far, without a closing marker."""
    status, answer = broken.post({**ASK, "max_tokens": 2})
    assert status == 200, answer
    choice = answer["choices"][0]
    assert choice["message"]["content"] == f"<tool_call>{BROKEN}"
    assert choice["finish_reason"] == "length"


def test_a_parsed_tool_call_is_still_a_tool_call(tmp_path: Path) -> None:
    """A call the parser reads is returned as tool_calls as before, with no marker."""
    model = tool_caller(tmp_path / "model", WHOLE)
    with running(model, tmp_path) as server:
        reply = server.client().chat.completions.create(
            model="default_model", max_tokens=16, tools=TOOLS, messages=[{"role": "user", "content": "Time?"}]
        )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    [call] = choice.message.tool_calls
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_time", {"zone": "UTC"})  # type: ignore[union-attr]
    assert not (choice.message.model_extra or {}).get("unparsed_tool_calls")


def test_parallel_tool_calls_false_keeps_the_first_call(tmp_path: Path) -> None:
    """A reply with several calls keeps them all, or only its first with parallel_tool_calls false, streamed or not."""
    chain = {"\n": "<tool_call>", "<tool_call>": WHOLE, WHOLE: "</tool_call>", "</tool_call>": "<tool_call>"}
    model = scripted_model(
        tmp_path / "model",
        chain,
        "<|im_end|>",
        special=["<tool_call>", "</tool_call>"],
        plain=[WHOLE],
        tokenizer_config={"tool_parser_type": "json_tools"},
    )
    with running(model, tmp_path) as server:
        client = server.client()
        ask: Any = {"model": "default_model", "max_tokens": 9, "tools": TOOLS, "messages": ASK["messages"]}
        every = client.chat.completions.create(**ask).choices[0].message.tool_calls
        first = client.chat.completions.create(**ask, parallel_tool_calls=False).choices[0].message.tool_calls
        streamed = [
            call.index
            for chunk in client.chat.completions.create(**ask, parallel_tool_calls=False, stream=True)
            if chunk.choices
            for call in chunk.choices[0].delta.tool_calls or []
        ]
    assert every is not None and len(every) == 3
    assert first is not None and len(first) == 1 and first[0].function.name == "get_time"
    assert streamed == [0]
