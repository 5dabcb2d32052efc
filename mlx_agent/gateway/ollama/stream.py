"""The worker's chat-completion chunks as Ollama's NDJSON stream, one JSON object a line (pure but for the clock).

Ollama's sequence: a line per piece of the answer (``/api/chat``: ``message.content`` or ``message.thinking``;
``/api/generate``: ``response`` or ``thinking``), each ``done: false``; the tool calls, whole, in one chat line
(``message.tool_calls``, arguments as an object) once the worker finished them; then one ``done: true`` line
with ``done_reason`` (``length`` when the reply limit cut it, else ``stop``), the token counts
(``prompt_eval_count``, ``eval_count``: the worker's usage) and the durations in nanoseconds, measured by the
front: ``total_duration`` from the request's arrival to the last line, ``load_duration`` the part of it the
model's worker spent loading for this request, ``prompt_eval_duration`` the rest until the first token arrived,
``eval_duration`` from the first token to the end.

NDJSON has no comment line: a keep-alive writes nothing (every Ollama client parses each line as JSON). A
stream that breaks ends with ``{"error": "..."}``, which Ollama's clients raise. With ``collect`` the lines are
kept instead of written, and ``reply`` folds them into the one object a non-streamed request gets.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mlx_agent.files import utc_iso
from mlx_agent.gateway.anthropic.reply import tool_input
from mlx_agent.gateway.sse import Accountant, ChunkTranslator

if TYPE_CHECKING:
    from mlx_agent.gateway.models.lifecycle import Lifecycle

NDJSON = "application/x-ndjson"
Clock = Callable[[], int]  # nanoseconds, monotonic


def load_duration(model: Lifecycle, arrived: float) -> Callable[[], int]:
    """Return what measures, in ns, how long the model's worker loaded after ``arrived`` (a request's time.time())."""

    def measure() -> int:
        worker = model.worker
        if worker is None or worker.ready_at is None or worker.ready_at < arrived:
            return 0
        return int((worker.ready_at - max(arrived, worker.started_at)) * 1e9)

    return measure


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class OllamaStream(ChunkTranslator):
    """One ``/api/chat`` or ``/api/generate`` answer, as ``sse.pump`` (or the collector) drives it."""

    def __init__(
        self,
        kind: str,
        model: str,
        *,
        arrived_ns: int,
        load_ns: Callable[[], int] = lambda: 0,
        on_usage: Accountant | None = None,
        collect: bool = False,
        clock: Clock = time.perf_counter_ns,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(on_usage)
        self.kind = kind  # "chat" or "generate"
        self.model = model
        self.arrived_ns = arrived_ns
        self.load_ns = load_ns
        self.clock = clock
        self.wall = wall
        self.collect = collect
        self.kept: list[dict[str, Any]] = []
        self.error: str | None = None
        self.first_ns: int | None = None
        self.calls: dict[str, dict[str, str]] = {}  # worker index -> id, name, argument text so far
        self.calls_sent = False

    # -- lines --------------------------------------------------------------------------------------------

    def _line(self, out: list[bytes], **fields: Any) -> None:
        record = {"model": self.model, "created_at": utc_iso(self.wall()), **fields}
        if self.collect:
            self.kept.append(record)
        else:
            out.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")

    def _piece(self, out: list[bytes], *, content: str = "", thinking: str | None = None, **more: Any) -> None:
        if self.first_ns is None:
            self.first_ns = self.clock()
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking is not None:
                message["thinking"] = thinking
            message.update(more)
            self._line(out, message=message, done=False)
        elif thinking is not None:
            self._line(out, response=content, thinking=thinking, done=False)
        else:
            self._line(out, response=content, done=False)

    def chunk(self, doc: dict[str, Any]) -> bytes:
        """Read a text-completion chunk (a raw generate's: ``choices[0].text``) as a chat delta, then as any."""
        choices = doc.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict) and "text" in choices[0]:
            first = choices[0]
            delta = {"content": first["text"]} if isinstance(first.get("text"), str) else {}
            doc = {**doc, "choices": [{"index": 0, "delta": delta, "finish_reason": first.get("finish_reason")}]}
        return super().chunk(doc)

    def start(self) -> bytes:
        """Return nothing: an Ollama stream opens with its first piece."""
        return b""

    def keepalive(self, event: bytes) -> bytes:
        """Return nothing: NDJSON has no comment line (module docstring)."""
        return b""

    def reasoning(self, text: str, out: list[bytes]) -> None:
        """Add a ``thinking`` line."""
        self._piece(out, thinking=text)

    def content(self, text: str, out: list[bytes]) -> None:
        """Add a content (``response``) line."""
        self._piece(out, content=text)

    def tool_call(self, call: dict[str, Any], position: int, out: list[bytes]) -> None:
        """Keep a tool call's fragment: Ollama sends each call whole."""
        if self.first_ns is None:
            self.first_ns = self.clock()
        key = str(call.get("index", position))
        function = call.get("function") or {}
        kept = self.calls.setdefault(key, {"id": "", "name": "", "arguments": ""})
        if call.get("id"):
            kept["id"] = str(call["id"])
        if function.get("name"):
            kept["name"] = str(function["name"])
        if isinstance(function.get("arguments"), str):
            kept["arguments"] += function["arguments"]

    def finished(self, out: list[bytes]) -> None:
        """Send the finished tool calls."""
        self._send_calls(out)

    def _send_calls(self, out: list[bytes]) -> None:
        if self.calls_sent or not self.calls:
            return
        self.calls_sent = True
        calls, text = [], ""
        for index, kept in enumerate(self.calls.values()):
            arguments = tool_input(kept["arguments"])
            if not kept["name"] or arguments is None:  # not a call Ollama's shape can hold: the model's text
                text += json.dumps({"name": kept["name"], "arguments": kept["arguments"]}, ensure_ascii=False)
                continue
            call: dict[str, Any] = {"function": {"index": index, "name": kept["name"], "arguments": arguments}}
            if kept["id"]:
                call["id"] = kept["id"]
            calls.append(call)
        if calls:
            self._piece(out, content=text, tool_calls=calls)
        elif text:
            self._piece(out, content=text)

    def finish(self) -> bytes:
        """Return the ``done: true`` line with the counts and durations."""
        out: list[bytes] = []
        self._send_calls(out)
        end = self.clock()
        first = self.first_ns if self.first_ns is not None else end
        load = max(0, min(self.load_ns(), first - self.arrived_ns))
        usage = self.usage if isinstance(self.usage, dict) else {}
        final: dict[str, Any] = (
            {"message": {"role": "assistant", "content": ""}} if self.kind == "chat" else {"response": ""}
        )
        self._line(
            out,
            **final,
            done=True,
            done_reason="length" if self.finish_reason == "length" else "stop",
            total_duration=end - self.arrived_ns,
            load_duration=load,
            prompt_eval_count=_count(usage.get("prompt_tokens")),
            prompt_eval_duration=max(0, first - self.arrived_ns - load),
            eval_count=_count(usage.get("completion_tokens")),
            eval_duration=end - first,
        )
        self.ended = True
        return b"".join(out)

    def fail(self, message: str) -> bytes:
        """Return the ``{"error": ...}`` line that ends a broken stream."""
        self.ended = True
        self.error = message
        return b"" if self.collect else json.dumps({"error": message}).encode() + b"\n"


def reply(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold a collected stream's lines into the one object a non-streamed request gets (its last line's fields)."""
    final = dict(lines[-1])
    content = "".join(_text(line, "content") for line in lines)
    thinking = "".join(_text(line, "thinking") for line in lines)
    calls = [call for line in lines for call in (line.get("message") or {}).get("tool_calls") or []]
    if "message" in final:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if thinking:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = calls
        final["message"] = message
    else:
        final["response"] = content
        if thinking:
            final["thinking"] = thinking
    return final


def _text(line: dict[str, Any], field: str) -> str:
    source = line.get("message") if "message" in line else line
    if field == "content" and "message" not in line:
        field = "response"
    value = source.get(field) if isinstance(source, dict) else None
    return value if isinstance(value, str) else ""
