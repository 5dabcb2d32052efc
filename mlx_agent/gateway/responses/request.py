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

* An ``input_image`` part of a message (``image_url`` a ``data:`` URL) becomes a chat ``image_url`` part beside
  the message's text parts, in their order (``images.py``: its limits; a remote URL is refused, nothing is
  fetched, and so is a ``file_id``).
* An ``input_image`` in a call output's ``output`` list: a chat ``tool`` message carries text only (mlx-vlm's
  chat endpoint reads images from user messages alone), so the tool message holds the output's text and the
  images of a run of outputs become one user message right after the run, in their order, under the same limits.

Refused with a 400 ``invalid_request_error``: file and audio content, ``tool_choice`` ``required`` or a
named tool (the runtime cannot force a call), item types that refer to server-side objects
(``item_reference``, ...), and parameters that need them (``conversation``, ``prompt``).

The body arrives parsed by its declaration (``bodies.ResponsesBody``): the fields above are its whitelist,
with their types and bounds (``reasoning`` and ``text`` included), so what is checked here is what a
declaration cannot say (input items and their content, which tool choice can be honoured).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.gateway.content_parts import MEDIA_PART_TYPES, media_refusal
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.images import check_data_url, image_part
from mlx_agent.gateway.responses.bodies import ResponsesBody, Text
from mlx_agent.gateway.tools import ToolSet, responses_tools

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


def to_chat(
    body: ResponsesBody, *, default_model: str, history: list[dict[str, Any]] | None = None
) -> ResponsesRequest:
    """Translate a Responses request (after ``history``, a stored conversation); raise ``RequestRefused``."""
    chat: dict[str, Any] = {"messages": []}
    if body.model is not None:
        chat["model"] = body.model
    if body.instructions:
        chat["messages"].append({"role": "system", "content": body.instructions})
    tools = responses_tools(body.tools)
    chat["messages"].extend(history or [])
    chat["messages"].extend(_input(body.input, tools))
    choice = _tool_choice(body.tool_choice)
    if tools.functions and choice != "none":
        chat["tools"] = tools.functions
    if body.max_output_tokens is not None:
        chat["max_tokens"] = body.max_output_tokens
    for name in ("temperature", "top_p"):
        value = getattr(body, name)
        if value is not None:
            chat[name] = value
    effort = body.reasoning.effort if body.reasoning is not None else None
    if effort is not None:
        chat["reasoning_effort"] = effort
    fmt = _text_format(body.text)
    if fmt is not None:
        chat["response_format"] = fmt
    chat["stream"] = bool(body.stream)
    if body.parallel_tool_calls is False and "tools" in chat:
        chat["parallel_tool_calls"] = False  # the worker returns the first call only
    echo = {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "tools": list(body.tools or []),  # the request's own, as sent
        "tool_choice": choice,
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "prompt_cache_key": body.prompt_cache_key,
        "metadata": body.metadata or {},
        "reasoning": {"effort": effort, "summary": None},
        "text": {"format": body_format(body.text)},
        "user": body.user,
        "previous_response_id": body.previous_response_id,
    }
    return ResponsesRequest(
        chat,
        body.model if body.model is not None else default_model,
        stream=bool(body.stream),
        store=body.store is not False,
        background=bool(body.background),
        echo=echo,
        tools=tools,
        previous_response_id=body.previous_response_id,
    )


def _text_format(text: Text | None) -> dict[str, Any] | None:
    """Return the response_format ``text.format`` asks for (None for plain text; the declaration checked it)."""
    fmt = text.format if text is not None else None
    kind = fmt.get("type") if fmt is not None else None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema" and fmt is not None:
        return {
            "type": "json_schema",
            "json_schema": {"name": str(fmt.get("name") or "output"), "schema": fmt["schema"]},
        }
    return None


def body_format(text: Text | None) -> Any:
    """Return the ``text.format`` a Response echoes."""
    fmt = text.format if text is not None else None
    return fmt if isinstance(fmt, Mapping) else {"type": "text"}


def _input(items: str | list[Any] | None, tools: ToolSet) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise refused(
            Code.INVALID_VALUE, "'input' must be a string or a non-empty list of items", param="input"
        )  # required, and not []
    out: list[dict[str, Any]] = []
    tool_images: list[dict[str, Any]] = []  # of the outputs just sent: one user message once their run ends
    for index, item in enumerate(items):
        where = f"input.{index}"
        if not isinstance(item, Mapping):
            raise refused(Code.INVALID_TYPE, "each input item must be an object", param=where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind not in OUTPUT_ITEMS and tool_images:
            out.append({"role": "user", "content": list(tool_images)})
            tool_images.clear()
        if kind == "message":
            out.append(_message(item, where))
        elif kind in CALL_ITEMS:
            _call(item, where, out, tools)
        elif kind in OUTPUT_ITEMS:
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise refused(Code.INVALID_VALUE, f"a {kind} needs its call_id", param=f"{where}.call_id")
            text, images = _output(item.get("output"), where)
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
            tool_images.extend(images)
        elif kind == "reasoning" or kind == COMPACTION_TRIGGER:
            continue  # earlier reasoning: templates leave it out of the prompt; a trigger is compact.py's
        elif kind in COMPACTION_ITEMS:
            out.append({"role": "user", "content": SUMMARY_LEAD + _summary(item, where)})
        else:
            raise refused(
                Code.UNSUPPORTED_CONTENT, f"input items of type {kind!r} are not supported here", param=f"{where}.type"
            )
    if tool_images:
        out.append({"role": "user", "content": tool_images})
    return out


def _output(output: object, where: str) -> tuple[str, list[dict[str, Any]]]:
    """Return a call output's text (its text parts joined) and its images as chat parts, in their order."""
    if output is None or isinstance(output, str):
        return output or "", []
    if not isinstance(output, list):
        raise refused(Code.INVALID_TYPE, "a call's output must be a string or a list of parts", param=f"{where}.output")
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for index, part in enumerate(output):
        inner = f"{where}.output.{index}"
        if isinstance(part, Mapping) and part.get("type") == "input_image":
            images.append(_image(part, inner))
        else:
            texts.append(_part_text(part, inner))
    return BLOCK_JOIN.join(texts), images


def _summary(item: Mapping[str, Any], where: str) -> str:
    """Return the summary a compaction item of this front carries; refuse another server's (opaque) one."""
    content = item.get("encrypted_content")
    if not isinstance(content, str) or not content.startswith(SUMMARY_MARK):
        raise refused(
            Code.UNSUPPORTED_CONTENT,
            "this compaction item was not made here (its content is another server's): compact the "
            "conversation again against this server, or send its messages instead",
            param=f"{where}.encrypted_content",
        )
    return content.removeprefix(SUMMARY_MARK)


def _message(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "assistant", "system", "developer"):
        raise refused(
            Code.INVALID_VALUE, "a message's role must be user, assistant, system or developer", param=f"{where}.role"
        )
    content = item.get("content")
    if isinstance(content, list) and any(isinstance(p, Mapping) and p.get("type") == "input_image" for p in content):
        return {"role": "system" if role == "developer" else role, "content": _parts(content, where)}
    return {"role": "system" if role == "developer" else role, "content": _text(content, where)}


def _parts(content: list[Any], where: str) -> list[dict[str, Any]]:
    """Return a message's content with images as chat parts: its text parts joined between the images."""
    parts: list[dict[str, Any]] = []
    texts: list[str] = []
    for index, part in enumerate(content):
        inner = f"{where}.content.{index}"
        if isinstance(part, Mapping) and part.get("type") == "input_image":
            if texts:
                parts.append({"type": "text", "text": BLOCK_JOIN.join(texts)})
                texts = []
            parts.append(_image(part, inner))
        else:
            texts.append(_part_text(part, inner))
    if texts:
        parts.append({"type": "text", "text": BLOCK_JOIN.join(texts)})
    return parts


def _image(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Return the chat image part of an ``input_image``, checked against the limits (``detail`` changes nothing)."""
    if part.get("image_url") is None and part.get("file_id") is not None:
        raise refused(
            Code.IMAGE_INVALID,
            "input_image file_id refers to an uploaded file, which this server does not keep; send image_url as a "
            "data: URL",
            param=f"{where}.file_id",
        )
    param = f"{where}.image_url"
    return image_part(check_data_url(part.get("image_url"), param), param)


def _text(content: object, where: str) -> str:
    """Return the text of a message's content or a call's output; refuse anything but text parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise refused(Code.INVALID_TYPE, "content must be a string or a list of parts", param=f"{where}.content")
    return BLOCK_JOIN.join(_part_text(part, f"{where}.content.{index}") for index, part in enumerate(content))


def _part_text(part: object, inner: str) -> str:
    """Return one text part's text; refuse any other part."""
    if not isinstance(part, Mapping):
        raise refused(Code.INVALID_TYPE, "each content part must be an object", param=inner)
    kind = part.get("type")
    if kind in TEXT_PARTS and isinstance(part.get("text"), str):
        return str(part["text"])
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return str(part["refusal"])
    if kind == "input_image":
        raise refused(
            Code.UNSUPPORTED_CONTENT,
            "an input_image is taken in a message's content or a call's output only",
            param=inner,
        )
    if kind in MEDIA_PART_TYPES:
        raise media_refusal(str(kind), inner)
    raise refused(Code.UNSUPPORTED_CONTENT, f"content parts of type {kind!r} are not supported here", param=inner)


def _call(item: Mapping[str, Any], where: str, out: list[dict[str, Any]], tools: ToolSet) -> None:
    call_id, name = item.get("call_id"), item.get("name")
    raw = item.get("arguments", "") if item.get("type") == "function_call" else item.get("input", "")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(raw, str):
        raise refused(Code.INVALID_VALUE, "a call needs string call_id, name and arguments (or input)", param=where)
    if item.get("type") == "custom_tool_call":
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
    raise refused(
        Code.UNSUPPORTED_TOOL_CHOICE,
        "tool_choice must be 'auto' or 'none': the local runtime cannot force a tool call",
        param="tool_choice",
    )
