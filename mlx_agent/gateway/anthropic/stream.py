"""The worker's chat-completion chunks as Anthropic's Messages stream, translated one chunk at a time (pure).

Anthropic's sequence: ``message_start``; a ``ping``; for each content block ``content_block_start``, its
deltas (``thinking_delta``, ``text_delta``, ``input_json_delta``) and ``content_block_stop``; then
``message_delta`` (``stop_reason``, usage) and ``message_stop``. A keepalive (the worker's, during its prefill,
or the front's own, ``sse.ClientStream``) becomes a ``ping`` when none was sent for ``PING_EVERY_S``, else an SSE
comment: Claude Code takes at most 30 pings in a row as signs of life before its stream watchdog (300 s at the
least) gives up, so pings 60 s apart carry a silent prefill for 35 minutes, and the comments keep the bytes
flowing for byte-level timeouts (which every SSE parser, the Anthropic SDKs' included, skips).

Blocks open in the order the worker writes: reasoning opens a ``thinking`` block, content a ``text`` block,
each new tool call (a new ``index``) a ``tool_use`` block whose ``input_json_delta``s are the argument
fragments. A block closes when another kind starts, or at the finish. The worker reports usage only at the
end, so ``message_start`` says 0 tokens and ``message_delta`` carries the counts (cumulative, as Anthropic's
do). A stream that breaks ends with an ``error`` event, after which nothing follows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mlx_agent.api_errors import Family, error_body
from mlx_agent.gateway.anthropic.reply import IdMaker, new_id, stop_reason, usage_of
from mlx_agent.gateway.sse import KEEPALIVE, Accountant, ChunkTranslator, sse

PING = sse("ping", {"type": "ping"})
COMMENT = KEEPALIVE + b"\n\n"
PING_EVERY_S = 60.0


class AnthropicStream(ChunkTranslator):
    """One Messages stream, as ``sse.pump`` drives it."""

    def __init__(
        self,
        model: str,
        make_id: IdMaker = new_id,
        on_usage: Accountant | None = None,
        omit_thinking: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(on_usage)
        self.clock = clock
        self.pinged = clock()
        self.model = model
        self.omit_thinking = omit_thinking  # thinking.display "omitted": the block opens and closes, no text
        self.make_id = make_id
        self.message_id = make_id("msg")
        self.ended = False
        self.blocks = 0  # blocks opened so far (the next block's index)
        self.open: str | None = None  # "thinking", "text" or "tool:<worker index>"
        self.tool_blocks: set[str] = set()

    def start(self) -> bytes:
        """Return ``message_start`` and the first ``ping``."""
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_of(None),
        }
        self.pinged = self.clock()
        return sse("message_start", {"type": "message_start", "message": message}) + PING

    def keepalive(self, event: bytes) -> bytes:
        """Return a ``ping`` if none was sent for ``PING_EVERY_S``, else an SSE comment."""
        now = self.clock()
        if now - self.pinged < PING_EVERY_S:
            return COMMENT
        self.pinged = now
        return PING

    def reasoning(self, text: str, out: list[bytes]) -> None:
        """Open a ``thinking`` block if need be and add its delta (no text with ``display: omitted``)."""
        self._switch("thinking", out, {"type": "thinking", "thinking": "", "signature": ""})
        if not self.omit_thinking:
            out.append(self._delta({"type": "thinking_delta", "thinking": text}))

    def content(self, text: str, out: list[bytes]) -> None:
        """Open a ``text`` block if need be and add its delta."""
        self._switch("text", out, {"type": "text", "text": ""})
        out.append(self._delta({"type": "text_delta", "text": text}))

    def finished(self, out: list[bytes]) -> None:
        """Close the open block."""
        self._close(out)

    def finish(self) -> bytes:
        """Return the closing events: the open block's stop, ``message_delta`` and ``message_stop``."""
        out: list[bytes] = []
        self._close(out)
        out.append(
            sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": stop_reason(self.finish_reason, bool(self.tool_blocks)),
                        "stop_sequence": None,
                    },
                    "usage": usage_of(self.usage),
                },
            )
        )
        out.append(sse("message_stop", {"type": "message_stop"}))
        self.ended = True
        return b"".join(out)

    def fail(self, message: str) -> bytes:
        """Return the ``error`` event that ends a broken stream."""
        self.ended = True
        return sse("error", error_body(Family.ANTHROPIC, None, message, status=502))

    # -- blocks -------------------------------------------------------------------------------------------

    def tool_call(self, call: dict[str, Any], position: int, out: list[bytes]) -> None:
        """Open a ``tool_use`` block for a new call and add its argument fragment."""
        key = f"tool:{call.get('index', position)}"
        function = call.get("function") or {}
        if key not in self.tool_blocks:
            self.tool_blocks.add(key)
            self._switch(
                key,
                out,
                {
                    "type": "tool_use",
                    "id": call.get("id") or self.make_id("toolu"),
                    "name": function.get("name") or "",
                    "input": {},
                },
            )
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments and self.open == key:
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))

    def _switch(self, kind: str, out: list[bytes], block: dict[str, Any]) -> None:
        if self.open == kind:
            return
        self._close(out)
        self.open = kind
        out.append(
            sse("content_block_start", {"type": "content_block_start", "index": self.blocks, "content_block": block})
        )
        self.blocks += 1

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse("content_block_delta", {"type": "content_block_delta", "index": self.blocks - 1, "delta": delta})

    def _close(self, out: list[bytes]) -> None:
        if self.open is not None:
            out.append(sse("content_block_stop", {"type": "content_block_stop", "index": self.blocks - 1}))
            self.open = None
