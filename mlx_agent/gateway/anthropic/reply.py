"""The worker's chat-completion reply as an Anthropic Message (pure).

* ``reasoning`` (or ``reasoning_content``) becomes a ``thinking`` block (``signature`` is empty: a local
  model signs nothing), ``content`` a ``text`` block, each tool call a ``tool_use`` block whose ``id`` is the
  worker's call id (or a generated ``toolu_...``) and whose ``input`` is the parsed arguments. A call whose
  arguments are not a JSON object is returned as text, as the model wrote it.
* ``stop_reason``: ``tool_use`` when the answer has a tool_use block, ``max_tokens`` for ``finish_reason``
  ``length``, else ``end_turn``. The runtime does not say which stop ended an answer, so ``stop_sequence`` is
  always null.
* usage: ``input_tokens`` = prompt tokens not read from the cache, ``cache_read_input_tokens`` = cached
  prompt tokens (so their sum is the prompt), ``cache_creation_input_tokens`` = 0, ``output_tokens``.

Errors in Anthropic's shape are built by ``mlx_agent.api_errors`` (``Family.ANTHROPIC``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

IdMaker = Callable[[str], str]


def new_id(prefix: str) -> str:
    """Return a fresh id such as ``msg_<hex>`` or ``toolu_<hex>``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def stop_reason(finish_reason: object, used_tools: bool) -> str:
    """Return Anthropic's ``stop_reason`` for a chat-completion ``finish_reason``."""
    if used_tools:
        return "tool_use"
    return "max_tokens" if finish_reason == "length" else "end_turn"


def usage_of(usage: object) -> dict[str, int]:
    """Return Anthropic usage for an OpenAI ``usage`` object (zeros where the worker gave none)."""
    doc = usage if isinstance(usage, Mapping) else {}
    prompt = _count(doc.get("prompt_tokens"))
    details = doc.get("prompt_tokens_details")
    cached = min(_count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0, prompt)
    return {
        "input_tokens": prompt - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": _count(doc.get("completion_tokens")),
    }


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def tool_input(arguments: object) -> dict[str, Any] | None:
    """Return a tool call's arguments as an object, or None if they are not a JSON object."""
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not isinstance(arguments, str):
        return None
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def message_from_chat(
    doc: Mapping[str, Any], model: str, make_id: IdMaker = new_id, *, omit_thinking: bool = False
) -> dict[str, Any]:
    """Return the Anthropic Message for a non-streamed chat completion (thinking text left out if asked)."""
    choice = doc["choices"][0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": "" if omit_thinking else reasoning, "signature": ""})
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    used_tools = False
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        name = function.get("name")
        arguments = tool_input(function.get("arguments"))
        if not isinstance(name, str) or arguments is None:
            content.append({"type": "text", "text": json.dumps(function, ensure_ascii=False)})
            continue
        used_tools = True
        content.append({"type": "tool_use", "id": call.get("id") or make_id("toolu"), "name": name, "input": arguments})
    return {
        "id": make_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason"), used_tools),
        "stop_sequence": None,
        "usage": usage_of(doc.get("usage")),
    }
