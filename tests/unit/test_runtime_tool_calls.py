"""The tool-call formatter that keeps what it cannot parse."""

from __future__ import annotations

import json
from typing import Any

from mlx_agent.runtime.reply.tool_calls import KeepingToolCallFormatter, UnparsedToolCall, as_written, split_calls


def parse(text: str, tools: Any) -> Any:
    """Parse a call the way mlx_lm's json_tools parser does."""
    return json.loads(text.strip())


def test_parsed_calls_are_formatted_as_mlx_lm_does() -> None:
    """A call that parses becomes an OpenAI tool call, with its arguments as a JSON string."""
    [call] = KeepingToolCallFormatter(parse, None)(['{"name": "f", "arguments": {"a": 1}}'])
    assert call["type"] == "function"
    assert call["function"] == {"name": "f", "arguments": '{"a": 1}'}


def test_a_call_that_does_not_parse_is_kept_with_its_error() -> None:
    """Bad JSON, a parser that raises something else, or no parser at all: the text is kept."""

    def picky(text: str, tools: Any) -> Any:
        raise KeyError("name")

    [bad] = KeepingToolCallFormatter(parse, None)(['{"name": "f"'])
    assert isinstance(bad, UnparsedToolCall) and bad["text"] == '{"name": "f"'
    assert bad["error"].startswith("JSONDecodeError")
    assert KeepingToolCallFormatter(picky, None)(["x"])[0]["error"] == "KeyError: 'name'"
    assert KeepingToolCallFormatter(None, None)(["x"])[0]["text"] == "x"


def test_calls_are_split_and_written_back_with_their_markers() -> None:
    """The handler separates kept calls and writes them as the model did, without an end if cut off."""
    good = {"type": "function", "function": {"name": "f", "arguments": "{}"}, "id": "1"}
    kept = UnparsedToolCall(text="{bad", error="e")
    assert split_calls([good, kept]) == ([good], [kept])
    assert as_written(kept, "<tool_call>", "</tool_call>", finished=True) == "<tool_call>{bad</tool_call>"
    assert as_written(kept, "<tool_call>", "</tool_call>", finished=False) == "<tool_call>{bad"


def test_a_call_whose_arguments_are_not_an_object_is_kept() -> None:
    """A parser's reading with arguments that are not a JSON object (a string, none) is not sent as a call."""

    def loose(text: str, tools: Any) -> Any:
        return {"name": "f", "arguments": text}

    [kept] = KeepingToolCallFormatter(loose, None)(['"a string"'])
    assert isinstance(kept, UnparsedToolCall) and "not an object" in kept["error"]


def test_text_a_parser_says_is_no_call_goes_back_unmarked() -> None:
    """A parser's NotACall keeps the text for the content, without the unparsed_tool_calls marker."""
    from mlx_agent.runtime.reply.parsers import NotACall
    from mlx_agent.runtime.reply.tool_calls import PlainText

    def answer(text: str, tools: Any) -> Any:
        raise NotACall("an answer")

    [kept] = KeepingToolCallFormatter(answer, None)([' "Bob"}'])
    assert isinstance(kept, PlainText) and kept["text"] == ' "Bob"}' and not kept.marked
    assert UnparsedToolCall(text="x", error="e").marked
