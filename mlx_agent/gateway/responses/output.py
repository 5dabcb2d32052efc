"""Response objects of the OpenAI Responses API, built from the worker's chat completion (pure).

* Reasoning the worker separates becomes a ``reasoning`` item, its text as written in ``content``
  (``summary`` is empty: no summaries are produced); ``content`` one ``message`` item with one
  ``output_text`` part; each tool call a ``function_call`` item (with its ``namespace`` when the tool came
  from one) or a ``custom_tool_call`` item (``tools.py``), ``call_id`` = the worker's call id or a made one.
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

from mlx_agent.api_errors import Code
from mlx_agent.gateway.responses.request import ResponsesRequest
from mlx_agent.gateway.tools import ToolSet

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
        "previous_response_id": echo.get("previous_response_id"),
        "prompt_cache_key": echo.get("prompt_cache_key"),
        "reasoning": echo.get("reasoning") or {"effort": None, "summary": None},
        "store": request.store,
        "temperature": echo.get("temperature"),
        "text": echo.get("text") or {"format": {"type": "text"}},
        "tool_choice": echo.get("tool_choice", "auto"),
        "tools": echo.get("tools", []),
        "top_p": echo.get("top_p"),
        "truncation": "disabled",
        "usage": None,
        "user": echo.get("user"),
        "metadata": echo.get("metadata") or {},
    }


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """Return an assistant ``message`` item (``text`` None: no content part yet)."""
    content = [] if text is None else [output_text(text)]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def output_text(text: str) -> dict[str, Any]:
    """Return an ``output_text`` content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """Return a ``reasoning`` item carrying the model's reasoning as written (no summary is made)."""
    content = [] if text is None else [{"type": "reasoning_text", "text": text}]
    return {"id": item_id, "type": "reasoning", "status": status, "summary": [], "content": content}


def call_item(item_id: str, call_id: str, visible: str, arguments: str, status: str, tools: ToolSet) -> dict[str, Any]:
    """Return the item of one tool call, named as the client named the tool (``function_call`` or custom)."""
    client = tools.client(visible)
    if client.kind == "custom":
        return {
            "id": item_id,
            "type": "custom_tool_call",
            "status": status,
            "call_id": call_id,
            "name": client.name,
            "input": custom_input(arguments),
        }
    item = {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": client.name,
        "arguments": arguments,
    }
    if client.namespace is not None:
        item["namespace"] = client.namespace
    return item


def custom_input(arguments: str) -> str:
    """Return a custom tool's input from the model's ``{"input": ...}`` arguments (as written if not that)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    value = parsed.get("input") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else arguments


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
    return {**base, "status": "failed", "error": {"code": Code.SERVER_ERROR, "message": message}, "output": output}


def response_from_chat(
    doc: Mapping[str, Any], base: Mapping[str, Any], make_id: IdMaker = new_id, tools: ToolSet | None = None
) -> dict[str, Any]:
    """Return the final Response object for a non-streamed chat completion."""
    known = tools or ToolSet()
    choice = doc["choices"][0]
    message = choice.get("message") or {}
    cut = choice.get("finish_reason") == "length"
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    text = message.get("content")
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
    if isinstance(reasoning, str) and reasoning:
        last = not (isinstance(text, str) and text) and not calls
        output.append(reasoning_item(make_id("rs"), reasoning, "incomplete" if cut and last else "completed"))
    if isinstance(text, str) and text:
        output.append(message_item(make_id("msg"), text, "incomplete" if cut and not calls else "completed"))
    for index, call in enumerate(calls):
        function = call.get("function") or {}
        status = "incomplete" if cut and index == len(calls) - 1 else "completed"
        output.append(
            call_item(
                make_id("fc"),
                str(call.get("id") or make_id("call")),
                str(function.get("name") or ""),
                arguments_text(function.get("arguments")),
                status,
                known,
            )
        )
    return finished(base, output, choice.get("finish_reason"), doc.get("usage"))


def conversation_of(request: ResponsesRequest, response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the chat messages a later ``previous_response_id`` continues: this input and this answer."""
    messages = list(request.chat["messages"])
    if request.echo.get("instructions"):
        messages = messages[1:]  # instructions belong to their own request, not to the conversation
    answer: dict[str, Any] = {"role": "assistant", "content": ""}
    calls: list[dict[str, Any]] = []
    for item in response.get("output") or []:
        if item.get("type") == "message":
            answer["content"] += "".join(p.get("text", "") for p in item.get("content") or [])
        elif item.get("type") in ("function_call", "custom_tool_call"):
            raw = (
                item.get("arguments")
                if item["type"] == "function_call"
                else json.dumps({"input": item.get("input", "")}, ensure_ascii=False)
            )
            calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {
                        "name": request.tools.visible(str(item.get("name")), item.get("namespace")),
                        "arguments": raw or "{}",
                    },
                }
            )
    if calls:
        answer["tool_calls"] = calls
    return [*messages, answer]
