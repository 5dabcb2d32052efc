"""The worker's chat-completion chunks as an OpenAI Responses stream, translated one chunk at a time (pure).

The sequence: ``response.created``, ``response.in_progress``; for reasoning, ``response.output_item.added``
(a reasoning item), ``response.reasoning_text.delta``..., ``response.reasoning_text.done``,
``response.output_item.done``; for text, ``response.output_item.added`` (a message),
``response.content_part.added``, ``response.output_text.delta``..., ``response.output_text.done``,
``response.content_part.done``, ``response.output_item.done``; for each tool call,
``response.output_item.added`` (a ``function_call``, or a ``custom_tool_call``), its argument deltas
(``response.function_call_arguments.delta``..., or one ``response.custom_tool_call_input.delta``), their
``.done``, ``response.output_item.done``; then ``response.completed``, or ``response.incomplete`` when the token
limit cut the answer. Every event has a ``sequence_number``. An item closes when the next one starts, or at the
end. A stream the worker breaks ends with ``response.failed``. A keepalive (the worker's during its prefill, or
the front's own whenever the stream was quiet: ``sse.ClientStream``) becomes another ``response.in_progress``
unless an event went out within half ``sse.KEEPALIVE_S`` (then an SSE comment): Codex's ``stream_idle_timeout_ms``
counts SSE events and skips comments, and clients take the event as a status update (the OpenAI SDK keeps the
output it has; the object carries none). When the request's own limit was lowered, ``max_output_tokens`` is the
limit granted (``limit_notice``). The final Response object is handed to ``on_final`` (to be stored).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from mlx_agent.gateway.responses.output import (
    IdMaker,
    arguments_text,
    call_item,
    custom_input,
    failed,
    finished,
    message_item,
    new_id,
    output_text,
    reasoning_item,
)
from mlx_agent.gateway.sse import KEEPALIVE, KEEPALIVE_S, Accountant, ChunkTranslator, sse
from mlx_agent.gateway.tools import ToolSet

COMMENT = KEEPALIVE + b"\n\n"


class ResponsesStream(ChunkTranslator):
    """One Responses stream, as ``sse.pump`` drives it."""

    def __init__(
        self,
        base: Mapping[str, Any],
        on_final: Callable[[dict[str, Any]], None] | None = None,
        make_id: IdMaker = new_id,
        on_usage: Accountant | None = None,
        tools: ToolSet | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(on_usage)
        self.clock = clock
        self.last_event = clock()
        self.base = dict(base)
        self.on_final = on_final
        self.make_id = make_id
        self.tools = tools or ToolSet()
        self.ended = False
        self.sequence = 0
        self.output: list[dict[str, Any]] = []  # closed items, in output order
        self.item: dict[str, Any] | None = None  # the open item
        self.text: list[str] = []  # the open message's or reasoning's text so far
        self.arguments: list[str] = []  # the open call's arguments so far
        self.tool_keys: set[object] = set()
        self.open_key: object = None  # the worker's index of the open call

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = sse(kind, {"type": kind, "sequence_number": self.sequence, **fields})
        self.sequence += 1
        self.last_event = self.clock()
        return event

    def start(self) -> bytes:
        """Return ``response.created`` and ``response.in_progress``."""
        return self._event("response.created", response=self.base) + self._event(
            "response.in_progress", response=self.base
        )

    def keepalive(self, event: bytes) -> bytes:
        """Return ``response.in_progress`` again, or a comment when an event went out within half ``KEEPALIVE_S``."""
        if self.clock() - self.last_event < KEEPALIVE_S / 2:  # half: the front's timer may fire a hair early
            return COMMENT
        return self._event("response.in_progress", response=self.base)

    def limit_lowered(self, granted: int) -> None:
        """Give the Response object the reply limit granted as its ``max_output_tokens`` (``limit_notice``)."""
        self.base["max_output_tokens"] = granted

    def reasoning(self, text: str, out: list[bytes]) -> None:
        """Add to the reasoning item (opened if need be)."""
        self._text_delta("reasoning", text, out)

    def content(self, text: str, out: list[bytes]) -> None:
        """Add to the message item (opened if need be)."""
        self._text_delta("message", text, out)

    def tool_call(self, call: dict[str, Any], position: int, out: list[bytes]) -> None:
        """Add to the call's item (opened if need be)."""
        self._call_delta(call, position, out)

    def finish(self) -> bytes:
        """Return the last item's closing events and ``response.completed`` (or ``response.incomplete``)."""
        out: list[bytes] = []
        self._close(out, "incomplete" if self.finish_reason == "length" else "completed")
        final = finished(self.base, self.output, self.finish_reason, self.usage)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        out.append(self._event(kind, response=final))
        self._end(final)
        return b"".join(out)

    def fail(self, message: str) -> bytes:
        """Return ``response.failed`` for a stream the worker broke off."""
        out: list[bytes] = []
        self._close(out, "incomplete")
        final = failed(self.base, self.output, message)
        out.append(self._event("response.failed", response=final))
        self._end(final)
        return b"".join(out)

    def _end(self, final: dict[str, Any]) -> None:
        self.ended = True
        if self.on_final is not None:
            self.on_final(final)

    # -- items --------------------------------------------------------------------------------------------

    def _text_delta(self, kind: str, text: str, out: list[bytes]) -> None:
        index = len(self.output)
        if self.item is None or self.item["type"] != kind:
            self._close(out, "completed")
            index = len(self.output)
            self.text = []
            if kind == "message":
                self.item = message_item(self.make_id("msg"), None, "in_progress")
                out.append(self._event("response.output_item.added", output_index=index, item=self.item))
                out.append(
                    self._event(
                        "response.content_part.added",
                        item_id=self.item["id"],
                        output_index=index,
                        content_index=0,
                        part=output_text(""),
                    )
                )
            else:
                self.item = reasoning_item(self.make_id("rs"), None, "in_progress")
                out.append(self._event("response.output_item.added", output_index=index, item=self.item))
        self.text.append(text)
        if kind == "message":
            out.append(
                self._event(
                    "response.output_text.delta",
                    item_id=self.item["id"],
                    output_index=index,
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            )
        else:
            out.append(
                self._event(
                    "response.reasoning_text.delta",
                    item_id=self.item["id"],
                    output_index=index,
                    content_index=0,
                    delta=text,
                )
            )

    def _call_delta(self, call: dict[str, Any], position: int, out: list[bytes]) -> None:
        key = call.get("index", position)
        function = call.get("function") or {}
        if key not in self.tool_keys:
            self.tool_keys.add(key)
            self._close(out, "completed")
            self.item = call_item(
                self.make_id("fc"),
                str(call.get("id") or self.make_id("call")),
                str(function.get("name") or ""),
                "",
                "in_progress",
                self.tools,
            )
            self.arguments = []
            self.open_key = key
            out.append(self._event("response.output_item.added", output_index=len(self.output), item=self.item))
        arguments = function.get("arguments")
        if arguments and self.item is not None and self.open_key == key:
            piece = arguments_text(arguments)
            self.arguments.append(piece)
            if self.item["type"] == "function_call":
                self.item["arguments"] += piece
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=self.item["id"],
                        output_index=len(self.output),
                        delta=piece,
                    )
                )

    def _close(self, out: list[bytes], status: str) -> None:
        item = self.item
        if item is None:
            return
        index = len(self.output)
        kind = item["type"]
        if kind == "message":
            text = "".join(self.text)
            out.append(
                self._event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
            )
            out.append(
                self._event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=output_text(text),
                )
            )
            done = message_item(item["id"], text, status)
        elif kind == "reasoning":
            text = "".join(self.text)
            out.append(
                self._event(
                    "response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0, text=text
                )
            )
            done = reasoning_item(item["id"], text, status)
        elif kind == "custom_tool_call":
            value = custom_input("".join(self.arguments))  # whole: the model writes it as JSON around the input
            out.append(
                self._event(
                    "response.custom_tool_call_input.delta", item_id=item["id"], output_index=index, delta=value
                )
            )
            out.append(
                self._event("response.custom_tool_call_input.done", item_id=item["id"], output_index=index, input=value)
            )
            done = {**item, "input": value, "status": status}
        else:
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                )
            )
            done = {**item, "status": status}
        out.append(self._event("response.output_item.done", output_index=index, item=done))
        self.output.append(done)
        self.item = None
        self.open_key = None
