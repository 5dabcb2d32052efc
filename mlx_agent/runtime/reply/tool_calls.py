"""Tool calls the model's parser cannot read are returned, not dropped.

mlx_lm's ``ToolCallFormatter`` logs a warning for a tool call its parser rejects and leaves it out: the
client sees an empty reply (and ``finish_reason: "tool_calls"`` with no calls). Ours keeps it. The reply's
``content`` gets the call as the model wrote it (between the model's tool-call markers), so a harness that
sends the transcript back shows the model what it wrote, and the message (or stream delta) gets the
documented marker ``unparsed_tool_calls: [{"text": ..., "error": ...}]``. ``finish_reason`` is
``"tool_calls"`` only when at least one call was parsed. A value no JSON parser reads (a number too large, say)
is sent as the text JSON would need (``lenient_tools.json_safe``), so the arguments stay JSON. Text a parser says
is no call at all (``parsers.NotACall``: Llama's ``{"name":`` starting an ordinary answer) goes back into the
content as written, without the marker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import mlx_lm.server as server

from mlx_agent.runtime.reply.harmony import CUT_OFF
from mlx_agent.runtime.reply.lenient_tools import json_safe
from mlx_agent.runtime.reply.parsers import NotACall
from mlx_agent.wire import UNPARSED_TOOL_CALLS

log = logging.getLogger(__name__)

MARKER = UNPARSED_TOOL_CALLS


class UnparsedToolCall(dict[str, str]):
    """A tool call the parser rejected, travelling in the formatter's result until the handler renders it."""

    marked = True  # listed under the ``unparsed_tool_calls`` marker (and counted by the front)


class PlainText(UnparsedToolCall):
    """Text a call marker started that the parser says is no call (``parsers.NotACall``): content, unmarked."""

    marked = False


class KeepingToolCallFormatter(server.ToolCallFormatter):
    """``mlx_lm.server.ToolCallFormatter`` that returns what it cannot parse as ``UnparsedToolCall``."""

    def __init__(self, tool_parser: Callable[[str, Any], Any] | None, tools: Any, streaming: bool = False) -> None:
        super().__init__(tool_parser, tools, streaming)  # type: ignore[no-untyped-call]
        self.parser = tool_parser
        self.tools = tools

    def __call__(self, tool_calls: Sequence[str]) -> list[dict[str, Any]]:
        """Format each raw tool call; one that does not parse is kept as an ``UnparsedToolCall``."""
        result: list[dict[str, Any]] = []
        for text in tool_calls or ():
            try:
                if self.parser is None:
                    raise ValueError("the model has no tool parser")
                parsed = self.parser(text, self.tools)
                calls = parsed if isinstance(parsed, list) else [parsed]
                for call in calls:  # a parser's fallback can read text as a call whose arguments are not an object
                    if not isinstance(call.get("arguments"), dict):
                        raise ValueError(f"the arguments of {call.get('name')!r} are not an object")
                formatted = [
                    self._format({**call, "arguments": json_safe(call["arguments"])})  # type: ignore[no-untyped-call]
                    for call in calls
                ]
            except NotACall as error:
                result.append(PlainText(text=text, error=f"{type(error).__name__}: {error}"))
                continue
            except Exception as error:  # parsers raise anything from ValueError to KeyError on bad input
                log.warning(
                    "mlx-agent: a tool call did not parse (%s: %s); returning it as text", type(error).__name__, error
                )
                written = text.removesuffix(CUT_OFF)  # a Harmony call cut by max_tokens
                result.append(UnparsedToolCall(text=written, error=f"{type(error).__name__}: {error}"))
                continue
            result.extend(formatted)
        return result


def split_calls(tool_calls: Sequence[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], list[UnparsedToolCall]]:
    """Separate parsed tool calls from the ones kept as text."""
    parsed: list[dict[str, Any]] = []
    unparsed: list[UnparsedToolCall] = []
    for call in tool_calls or ():
        (unparsed if isinstance(call, UnparsedToolCall) else parsed).append(call)  # type: ignore[arg-type]
    return parsed, unparsed


def as_written(call: UnparsedToolCall, start: str | None, end: str | None, finished: bool) -> str:
    """Return the call as the model wrote it: its text between the tool-call markers (no end if cut off)."""
    return f"{start or ''}{call['text']}{(end or '') if finished else ''}"
