"""Response objects of the OpenAI Responses API, built from the worker's chat completion (pure).

* ``content`` becomes one ``message`` output item with one ``output_text`` part; each tool call a
  ``function_call`` item (``call_id`` = the worker's call id, or a generated ``call_...``). Reasoning text the
  worker separates is not returned: no reasoning items are produced.
* ``finish_reason`` ``length`` makes the response ``incomplete`` (``incomplete_details.reason``
  ``max_output_tokens``) and the item it cut ``incomplete``; otherwise it is ``completed``.
* usage: ``input_tokens`` = prompt tokens (cached ones included, as OpenAI counts),
  ``input_tokens_details.cached_tokens``, ``output_tokens``; ``reasoning_tokens`` is 0 (the worker does not
  count them apart).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from mlx_agent.gateway.responses.request import ResponsesRequest

IdMaker = Callable[[str], str]


def new_id(prefix: str) -> str:
    """Return a fresh id such as ``resp_<hex>``, ``msg_<hex>``, ``fc_<hex>`` or ``call_<hex>``."""
    return f"{prefix}_{uuid.uuid4().hex}"


def base_response(request: ResponsesRequest, response_id: str, created_at: int) -> dict[str, Any]:
    """Return the Response object as it starts: ``in_progress``, no output, the request's settings echoed."""
    echo = request.echo
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "in_progress",
        "background": request.background,
        "error": None,
        "incomplete_details": None,
        "instructions": echo.get("instructions"),
        "max_output_tokens": echo.get("max_output_tokens"),
        "model": request.model,
        "output": [],
        "parallel_tool_calls": echo.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "prompt_cache_key": echo.get("prompt_cache_key"),
        "reasoning": {"effort": None, "summary": None},
        "store": request.store,
        "temperature": echo.get("temperature"),
        "text": {"format": {"type": "text"}},
        "tool_choice": echo.get("tool_choice", "auto"),
        "tools": echo.get("tools", []),
        "top_p": echo.get("top_p"),
        "truncation": "disabled",
        "usage": None,
        "metadata": echo.get("metadata") or {},
    }


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """Return an assistant ``message`` item (``text`` None: no content part yet)."""
    content = [] if text is None else [output_text(text)]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def output_text(text: str) -> dict[str, Any]:
    """Return an ``output_text`` content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    """Return a ``function_call`` item."""
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def arguments_text(arguments: object) -> str:
    """Return a tool call's arguments as the JSON text the Responses API carries."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False) if isinstance(arguments, Mapping) else "{}"


def usage_of(usage: object) -> dict[str, Any]:
    """Return Responses usage for an OpenAI chat ``usage`` object (zeros where the worker gave none)."""
    doc = usage if isinstance(usage, Mapping) else {}
    prompt, completion = _count(doc.get("prompt_tokens")), _count(doc.get("completion_tokens"))
    details = doc.get("prompt_tokens_details")
    cached = min(_count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0, prompt)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def finished(
    base: Mapping[str, Any], output: list[dict[str, Any]], finish_reason: object, usage: object
) -> dict[str, Any]:
    """Return the final Response object: ``completed``, or ``incomplete`` when the token limit cut it."""
    cut = finish_reason == "length"
    return {
        **base,
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": output,
        "usage": usage_of(usage),
    }


def failed(base: Mapping[str, Any], output: list[dict[str, Any]], message: str) -> dict[str, Any]:
    """Return the Response object of an answer the worker broke off."""
    return {**base, "status": "failed", "error": {"code": "server_error", "message": message}, "output": output}


def response_from_chat(doc: Mapping[str, Any], base: Mapping[str, Any], make_id: IdMaker = new_id) -> dict[str, Any]:
    """Return the final Response object for a non-streamed chat completion."""
    choice = doc["choices"][0]
    message = choice.get("message") or {}
    cut = choice.get("finish_reason") == "length"
    output: list[dict[str, Any]] = []
    text = message.get("content")
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
    if isinstance(text, str) and text:
        output.append(message_item(make_id("msg"), text, "incomplete" if cut and not calls else "completed"))
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        arguments = function.get("arguments")
        status = "incomplete" if cut and index == len(calls) - 1 else "completed"
        output.append(
            function_call_item(
                make_id("fc"),
                str(call.get("id") or make_id("call")),
                str(function.get("name") or ""),
                arguments_text(arguments),
                status,
            )
        )
    return finished(base, output, choice.get("finish_reason"), doc.get("usage"))
