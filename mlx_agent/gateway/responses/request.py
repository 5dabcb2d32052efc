"""An OpenAI Responses request, translated into the worker's chat-completions body (pure).

The rules (docs/gateway.md, "OpenAI Responses API"):

* ``instructions`` becomes the first, ``system`` message. ``input`` is a string (one user message) or a list
  of items: a text message (``user``, ``assistant``, ``system``; ``developer`` becomes ``system``; its text
  parts joined by a blank line), a ``function_call`` (a ``tool_calls`` entry of an assistant message; calls
  that follow an assistant message or each other join it), a ``function_call_output`` (a ``tool`` message).
* Function tools become chat function tools; ``tool_choice`` ``auto`` sends them, ``none`` sends none.
* ``max_output_tokens`` becomes ``max_tokens`` (clamped to the plan by the gateway; the plan's limit when
  absent); ``temperature`` and ``top_p`` carry over.
* Accepted without changing generation: ``parallel_tool_calls``, ``prompt_cache_key``, ``client_metadata``,
  ``metadata`` (echoed), an empty ``reasoning`` object, ``include: ["reasoning.encrypted_content"]`` (no
  reasoning items are produced), ``text.format`` ``text``, ``truncation: "disabled"``, ``store``,
  ``background`` (the answer is complete before the reply returns).

Refused with a 400 ``invalid_request_error``: image, file and audio content, tools other than functions,
strict function schemas, reasoning controls, structured text formats and verbosity, forced ``tool_choice``
(``required`` or a named tool), other item types, and every other parameter (``previous_response_id``,
``conversation``, ``prompt``, ``service_tier``, ``user``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from mlx_agent.errors import RequestRefused

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
    }
)
ACCEPTED_INCLUDES = frozenset({"reasoning.encrypted_content"})
TOOL_FIELDS = frozenset({"type", "name", "description", "parameters", "strict"})
TEXT_PARTS = ("input_text", "output_text")
BLOCK_JOIN = "\n\n"


@dataclass(frozen=True)
class ResponsesRequest:
    """A translated Responses request: the worker's chat body and what the Response object echoes."""

    chat: dict[str, Any]
    model: str
    stream: bool = False
    store: bool = True
    background: bool = False
    echo: dict[str, Any] = field(default_factory=dict)


def refuse(message: str, param: str, code: str = "invalid_value") -> RequestRefused:
    """Return the 400 ``invalid_request_error`` for a request the gateway cannot honour."""
    return RequestRefused(400, message, code=code, param=param)


def to_chat(body: object, *, default_model: str) -> ResponsesRequest:
    """Translate a Responses request; raise ``RequestRefused`` for what the module docstring lists."""
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
    _check_accepted(body)
    chat: dict[str, Any] = {"messages": []}
    if model is not None:
        chat["model"] = model
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise refuse("'instructions' must be a string", "instructions", "invalid_type")
        if instructions:
            chat["messages"].append({"role": "system", "content": instructions})
    chat["messages"].extend(_input(body.get("input")))
    chat_tools, echo_tools, tool_choice = _tools(body.get("tools"), body.get("tool_choice"))
    if chat_tools:
        chat["tools"] = chat_tools
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
    flags = {name: _flag(body, name) for name in ("stream", "store", "background", "parallel_tool_calls")}
    chat["stream"] = bool(flags["stream"])
    echo = {
        "instructions": instructions,
        "max_output_tokens": max_output,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "tools": echo_tools,
        "tool_choice": tool_choice,
        "parallel_tool_calls": True if flags["parallel_tool_calls"] is None else flags["parallel_tool_calls"],
        "prompt_cache_key": body.get("prompt_cache_key"),
        "metadata": body.get("metadata") or {},
    }
    return ResponsesRequest(
        chat,
        model if model is not None else default_model,
        stream=bool(flags["stream"]),
        store=flags["store"] is not False,
        background=bool(flags["background"]),
        echo=echo,
    )


def _integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _flag(body: Mapping[str, Any], name: str) -> bool | None:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise refuse(f"'{name}' must be true or false", name, "invalid_type")
    return value


def _check_accepted(body: Mapping[str, Any]) -> None:
    """Refuse values of the accepted fields that would ask for something the runtime cannot do."""
    reasoning = body.get("reasoning")
    if reasoning is not None and (not isinstance(reasoning, Mapping) or any(v is not None for v in reasoning.values())):
        raise refuse(
            "reasoning controls are not supported: the local model reasons (or not) as its template says; "
            "send an empty reasoning object or none",
            "reasoning",
            "unsupported_parameter",
        )
    include = body.get("include")
    if include is not None and (not isinstance(include, list) or not set(include) <= ACCEPTED_INCLUDES):
        raise refuse(
            "only include: ['reasoning.encrypted_content'] is accepted (no reasoning items are produced)",
            "include",
            "unsupported_parameter",
        )
    text = body.get("text")
    if text is not None:
        fmt = text.get("format") if isinstance(text, Mapping) else None
        if (
            not isinstance(text, Mapping)
            or any(k not in ("format", "verbosity") for k in text)
            or text.get("verbosity") is not None
            or (fmt is not None and (not isinstance(fmt, Mapping) or fmt.get("type") != "text"))
        ):
            raise refuse(
                "structured text formats and verbosity are not supported: only text.format 'text'",
                "text",
                "unsupported_parameter",
            )
    if body.get("truncation") not in (None, "disabled"):
        raise refuse("only truncation 'disabled' is supported", "truncation", "unsupported_parameter")
    for name in ("prompt_cache_key",):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise refuse(f"'{name}' must be a string", name, "invalid_type")
    for name in ("client_metadata", "metadata"):
        if body.get(name) is not None and not isinstance(body[name], Mapping):
            raise refuse(f"'{name}' must be an object", name, "invalid_type")


def _input(items: object) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise refuse("'input' must be a string or a non-empty list of items", "input")
    out: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, Mapping):
            raise refuse("each input item must be an object", where, "invalid_type")
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            out.append(_message(item, where))
        elif kind == "function_call":
            _function_call(item, where, out)
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise refuse("a function_call_output needs its call_id", f"{where}.call_id")
            out.append({"role": "tool", "tool_call_id": call_id, "content": _text(item.get("output"), where)})
        else:
            raise refuse(f"input items of type {kind!r} are not supported here", f"{where}.type", "unsupported_content")
    return out


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
        inner = f"{where}.content[{index}]"
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


def _function_call(item: Mapping[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments", "")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
        raise refuse("a function_call needs string call_id, name and arguments", where)
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments or "{}"}}
    previous = out[-1] if out else None
    if previous is not None and previous["role"] == "assistant":
        previous.setdefault("tool_calls", []).append(call)
    else:
        out.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _tools(tools: object, tool_choice: object) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Return (the chat tools to send, the tools the Response echoes, the tool_choice it echoes)."""
    if tool_choice not in (None, "auto", "none"):
        raise refuse(
            "tool_choice must be 'auto' or 'none': the local runtime cannot force a tool call",
            "tool_choice",
            "unsupported_tool_choice",
        )
    choice = str(tool_choice or "auto")
    if tools is None:
        return [], [], choice
    if not isinstance(tools, list):
        raise refuse("'tools' must be a list", "tools", "invalid_type")
    chat: list[dict[str, Any]] = []
    echo: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if not isinstance(tool, Mapping):
            raise refuse("each tool must be an object", where, "invalid_type")
        if tool.get("type") != "function":
            raise refuse(
                f"tool type {tool.get('type')!r} is not supported: only function tools run locally",
                f"{where}.type",
                "unsupported_tool",
            )
        for name in sorted(tool):
            if name not in TOOL_FIELDS and tool[name] not in (None, False, [], {}):
                raise refuse(f"the tool field '{name}' is not supported here", f"{where}.{name}", "unsupported_tool")
        if tool.get("strict"):
            raise refuse(
                "strict function schemas are not supported: the runtime does not enforce tool arguments; "
                "send strict: false",
                f"{where}.strict",
                "unsupported_tool",
            )
        name, description, parameters = tool.get("name"), tool.get("description"), tool.get("parameters")
        if not isinstance(name, str) or not name:
            raise refuse("a function tool needs a name", f"{where}.name")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise refuse("a function tool's parameters must be an object", f"{where}.parameters", "invalid_type")
        function: dict[str, Any] = {"name": name}
        if isinstance(description, str):
            function["description"] = description
        function["parameters"] = dict(parameters) if parameters is not None else {"type": "object", "properties": {}}
        chat.append({"type": "function", "function": function})
        echo.append(
            {
                "type": "function",
                "name": name,
                "description": description if isinstance(description, str) else None,
                "parameters": parameters,
                "strict": False,
            }
        )
    return ([] if choice == "none" else chat), echo, choice
