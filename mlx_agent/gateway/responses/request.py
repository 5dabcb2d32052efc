"""An OpenAI Responses request, translated into the worker's chat-completions body (pure).

The rules (docs/gateway.md, "OpenAI Responses API"), written for what Codex CLI sends:

* ``instructions`` becomes the first, ``system`` message. ``input`` is a string (one user message) or a list
  of items: a text message (``user``, ``assistant``, ``system``; ``developer`` becomes ``system``; its text
  parts joined by a blank line), a ``function_call`` or ``custom_tool_call`` (a ``tool_calls`` entry of an
  assistant message; calls that follow an assistant message or each other join it), their outputs (``tool``
  messages), ``reasoning`` items (dropped: chat templates drop earlier reasoning themselves), and
  ``compaction`` items this front made (``compact.py``: a user message holding the summary).
* ``previous_response_id``: the stored conversation of that response comes first (``ResponseStore``).
* Tools (``tools.py``): functions (``strict`` accepted), ``custom`` tools, ``namespace`` groups (flattened),
  and hosted tools that cannot run here (left out and named in a header). ``tool_choice`` ``auto`` sends
  them, ``none`` sends none.
* ``max_output_tokens`` becomes ``max_tokens`` (the front applies its ceiling; the plan's limit when absent);
  ``temperature`` and ``top_p`` carry over; ``reasoning.effort`` becomes ``reasoning_effort`` for templates
  that read it; ``text.format`` ``json_schema`` / ``json_object`` becomes an enforced ``response_format``.
* ``parallel_tool_calls: false`` reaches the worker, which returns the reply's first tool call only.
* Accepted without changing generation: ``prompt_cache_key``, ``client_metadata``,
  ``metadata`` (echoed), ``reasoning.summary`` (no summaries are produced; reasoning comes back as written),
  ``include`` values, ``text.verbosity``, ``truncation`` (a prompt longer than the context is refused, never
  cut), ``store``, ``background``, ``user``, ``safety_identifier``, ``service_tier``, ``prompt_cache_retention``.

Refused with a 400 ``invalid_request_error``: image, file and audio content, ``tool_choice`` ``required`` or a
named tool (the runtime cannot force a call), item types that refer to server-side objects
(``item_reference``, ...), and parameters that need them (``conversation``, ``prompt``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from mlx_agent.gateway.tools import ToolSet, refuse, responses_tools

RESPONSE_FIELDS = frozenset(
    {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "stream",
        "store",
        "background",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "prompt_cache_key",
        "client_metadata",
        "metadata",
        "reasoning",
        "include",
        "text",
        "truncation",
        "user",
        "safety_identifier",
        "service_tier",
        "prompt_cache_retention",
        "previous_response_id",
        "stream_options",
    }
)
TEXT_PARTS = ("input_text", "output_text")
CALL_ITEMS = ("function_call", "custom_tool_call")
OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output")
# A compaction item this front made (``compact.py``) carries the served model's summary, marked as ours; sent
# back, it is read as a user message that opens with SUMMARY_LEAD. ``compaction_trigger`` asks for one (compact.py).
COMPACTION_ITEMS = ("compaction", "compaction_summary")
COMPACTION_TRIGGER = "compaction_trigger"
SUMMARY_MARK = "mlx-agent-summary-v1:"
SUMMARY_LEAD = "Summary of the conversation so far (the earlier turns were compacted into it):\n\n"
BLOCK_JOIN = "\n\n"


@dataclass(frozen=True)
class ResponsesRequest:
    """A translated Responses request: the worker's chat body, its tools, and what the Response echoes."""

    chat: dict[str, Any]
    model: str
    stream: bool = False
    store: bool = True
    background: bool = False
    echo: dict[str, Any] = field(default_factory=dict)
    tools: ToolSet = field(default_factory=ToolSet)
    previous_response_id: str | None = None


def to_chat(body: object, *, default_model: str, history: list[dict[str, Any]] | None = None) -> ResponsesRequest:
    """Translate a Responses request (after ``history``, a stored conversation); raise ``RequestRefused``."""
    if not isinstance(body, dict):
        raise refuse("the request body must be a JSON object", "body", "invalid_body")
    for name in sorted(body):
        if name not in RESPONSE_FIELDS and body[name] is not None:
            raise refuse(
                f"'{name}' is not supported: the local runtime cannot honour it", name, "unsupported_parameter"
            )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise refuse("'model' must be a string", "model", "invalid_type")
    chat: dict[str, Any] = {"messages": []}
    if model is not None:
        chat["model"] = model
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise refuse("'instructions' must be a string", "instructions", "invalid_type")
        if instructions:
            chat["messages"].append({"role": "system", "content": instructions})
    tools = responses_tools(body.get("tools"))
    chat["messages"].extend(history or [])
    chat["messages"].extend(_input(body.get("input"), tools))
    choice = _tool_choice(body.get("tool_choice"))
    if tools.functions and choice != "none":
        chat["tools"] = tools.functions
    max_output = body.get("max_output_tokens")
    if max_output is not None:
        if not _integer(max_output) or max_output < 1:
            raise refuse("'max_output_tokens' must be a positive integer", "max_output_tokens", "invalid_type")
        chat["max_tokens"] = max_output
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None:
            if not _number(value):
                raise refuse(f"'{name}' must be a number", name, "invalid_type")
            chat[name] = value
    effort = _reasoning(body.get("reasoning"))
    if effort is not None:
        chat["reasoning_effort"] = effort
    fmt = _text_format(body.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    _check_accepted(body)
    flags = {name: _flag(body, name) for name in ("stream", "store", "background", "parallel_tool_calls")}
    chat["stream"] = bool(flags["stream"])
    if flags["parallel_tool_calls"] is False and "tools" in chat:
        chat["parallel_tool_calls"] = False  # the worker returns the first call only
    previous = body.get("previous_response_id")
    echo = {
        "instructions": instructions,
        "max_output_tokens": max_output,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "tools": _echo_tools(body.get("tools")),
        "tool_choice": choice,
        "parallel_tool_calls": True if flags["parallel_tool_calls"] is None else flags["parallel_tool_calls"],
        "prompt_cache_key": body.get("prompt_cache_key"),
        "metadata": body.get("metadata") or {},
        "reasoning": {"effort": effort, "summary": None},
        "text": {"format": body_format(body.get("text"))},
        "user": body.get("user"),
        "previous_response_id": previous,
    }
    return ResponsesRequest(
        chat,
        model if model is not None else default_model,
        stream=bool(flags["stream"]),
        store=flags["store"] is not False,
        background=bool(flags["background"]),
        echo=echo,
        tools=tools,
        previous_response_id=previous,
    )


def previous_id(body: object) -> str | None:
    """Return a request's ``previous_response_id`` (a string), or None; refuse any other type."""
    value = body.get("previous_response_id") if isinstance(body, dict) else None
    if value is not None and (not isinstance(value, str) or not value):
        raise refuse("'previous_response_id' must be a response id", "previous_response_id", "invalid_type")
    return value


def _integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _flag(body: Mapping[str, Any], name: str) -> bool | None:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise refuse(f"'{name}' must be true or false", name, "invalid_type")
    return value


def _reasoning(reasoning: object) -> str | None:
    """Return ``reasoning.effort`` (``summary`` is accepted: reasoning comes back as written, unsummarised)."""
    if reasoning is None:
        return None
    if not isinstance(reasoning, Mapping):
        raise refuse("'reasoning' must be an object", "reasoning", "invalid_type")
    for name in sorted(reasoning):
        if name not in ("effort", "summary", "generate_summary") and reasoning[name] is not None:
            raise refuse(f"reasoning.{name} is not supported here", f"reasoning.{name}", "unsupported_parameter")
    effort = reasoning.get("effort")
    if effort is not None and (not isinstance(effort, str) or not effort):
        raise refuse("reasoning.effort must be a string such as 'low' or 'high'", "reasoning.effort")
    return effort


def _text_format(text: object) -> dict[str, Any] | None:
    """Return the response_format ``text.format`` asks for (None for plain text); ``verbosity`` is accepted."""
    if text is None:
        return None
    if not isinstance(text, Mapping):
        raise refuse("'text' must be an object", "text", "invalid_type")
    for name in sorted(text):
        if name not in ("format", "verbosity") and text[name] is not None:
            raise refuse(f"text.{name} is not supported here", f"text.{name}", "unsupported_parameter")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema" and isinstance(fmt, Mapping) and isinstance(fmt.get("schema"), Mapping):
        return {
            "type": "json_schema",
            "json_schema": {"name": str(fmt.get("name") or "output"), "schema": fmt["schema"]},
        }
    raise refuse("text.format must be text, json_object or json_schema with a schema", "text.format")


def body_format(text: object) -> Any:
    """Return the ``text.format`` a Response echoes."""
    fmt = text.get("format") if isinstance(text, Mapping) else None
    return fmt if isinstance(fmt, Mapping) else {"type": "text"}


def _check_accepted(body: Mapping[str, Any]) -> None:
    """Check the types of the fields accepted without effect, so a malformed one is still a 400."""
    include = body.get("include")
    if include is not None and (not isinstance(include, list) or not all(isinstance(i, str) for i in include)):
        raise refuse("'include' must be a list of strings", "include", "invalid_type")
    if body.get("truncation") not in (None, "disabled", "auto"):
        raise refuse("truncation must be 'auto' or 'disabled'", "truncation", "invalid_value")
    for name in ("prompt_cache_key", "user", "safety_identifier", "service_tier", "prompt_cache_retention"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise refuse(f"'{name}' must be a string", name, "invalid_type")
    for name in ("client_metadata", "metadata", "stream_options"):
        if body.get(name) is not None and not isinstance(body[name], Mapping):
            raise refuse(f"'{name}' must be an object", name, "invalid_type")


def _input(items: object, tools: ToolSet) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise refuse("'input' must be a string or a non-empty list of items", "input")
    out: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        where = f"input.{index}"
        if not isinstance(item, Mapping):
            raise refuse("each input item must be an object", where, "invalid_type")
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            out.append(_message(item, where))
        elif kind in CALL_ITEMS:
            _call(item, where, out, tools)
        elif kind in OUTPUT_ITEMS:
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise refuse(f"a {kind} needs its call_id", f"{where}.call_id")
            out.append({"role": "tool", "tool_call_id": call_id, "content": _text(item.get("output"), where)})
        elif kind == "reasoning" or kind == COMPACTION_TRIGGER:
            continue  # earlier reasoning: templates leave it out of the prompt; a trigger is compact.py's
        elif kind in COMPACTION_ITEMS:
            out.append({"role": "user", "content": SUMMARY_LEAD + _summary(item, where)})
        else:
            raise refuse(f"input items of type {kind!r} are not supported here", f"{where}.type", "unsupported_content")
    return out


def _summary(item: Mapping[str, Any], where: str) -> str:
    """Return the summary a compaction item of this front carries; refuse another server's (opaque) one."""
    content = item.get("encrypted_content")
    if not isinstance(content, str) or not content.startswith(SUMMARY_MARK):
        raise refuse(
            "this compaction item was not made here (its content is another server's): compact the "
            "conversation again against this server, or send its messages instead",
            f"{where}.encrypted_content",
            "unsupported_content",
        )
    return content.removeprefix(SUMMARY_MARK)


def _message(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise refuse("a message's role must be user, assistant, system or developer", f"{where}.role")
    return {"role": "system" if role == "developer" else role, "content": _text(item.get("content"), where)}


def _text(content: object, where: str) -> str:
    """Return the text of a message's content or a call's output; refuse anything but text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise refuse("content must be a string or a list of parts", f"{where}.content", "invalid_type")
    texts = []
    for index, part in enumerate(content):
        inner = f"{where}.content.{index}"
        if not isinstance(part, Mapping):
            raise refuse("each content part must be an object", inner, "invalid_type")
        kind = part.get("type")
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        elif kind in ("input_image", "input_file", "input_audio"):
            raise refuse(
                f"{kind} content is not supported: the local model reads text only", inner, "unsupported_content"
            )
        else:
            raise refuse(f"content parts of type {kind!r} are not supported here", inner, "unsupported_content")
    return BLOCK_JOIN.join(texts)


def _call(item: Mapping[str, Any], where: str, out: list[dict[str, Any]], tools: ToolSet) -> None:
    call_id, name = item.get("call_id"), item.get("name")
    raw = item.get("arguments", "") if item.get("type") == "function_call" else item.get("input", "")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(raw, str):
        raise refuse("a call needs string call_id, name and arguments (or input)", where)
    if item.get("type") == "custom_tool_call":
        import json

        raw = json.dumps({"input": raw}, ensure_ascii=False)
    visible = tools.visible(name, item.get("namespace"))
    call = {"id": call_id, "type": "function", "function": {"name": visible, "arguments": raw or "{}"}}
    previous = out[-1] if out else None
    if previous is not None and previous["role"] == "assistant":
        previous.setdefault("tool_calls", []).append(call)
    else:
        out.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _tool_choice(tool_choice: object) -> str:
    if tool_choice in (None, "auto", "none"):
        return str(tool_choice or "auto")
    raise refuse(
        "tool_choice must be 'auto' or 'none': the local runtime cannot force a tool call",
        "tool_choice",
        "unsupported_tool_choice",
    )


def _echo_tools(tools: object) -> list[Any]:
    """Return the tools a Response echoes: the request's own, as sent."""
    return list(tools) if isinstance(tools, list) else []
