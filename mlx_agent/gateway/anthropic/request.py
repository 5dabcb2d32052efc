"""An Anthropic Messages request, translated into the worker's chat-completions body (pure).

The rules (docs/gateway.md, "Anthropic Messages API"), written for what Claude Code sends:

* ``system`` (a string, or text blocks joined by a blank line) becomes the first, ``system`` message. Claude
  Code's per-request ``x-anthropic-billing-header: ...`` block is left out: it changes on every turn and would
  make the worker's prompt cache miss the whole conversation.
* A ``user`` turn: its text blocks (joined by a blank line) become a ``user`` message and each ``tool_result``
  block a ``tool`` message (``tool_call_id`` = ``tool_use_id``; text content joined by a blank line), in the
  order they come. An ``assistant`` turn: its text becomes the content and each ``tool_use`` block a
  ``tool_calls`` entry (arguments = the input as JSON); ``thinking`` blocks are dropped (chat templates drop
  earlier reasoning themselves, which is also what ``context_management``'s clear-thinking edit asks for). A
  ``system`` message inside ``messages`` stays a system message at its place (the worker keeps it there).
* A last ``assistant`` turn is continued (``continue_final_message``), as Anthropic continues a prefill.
* Custom tools become function tools (``tools.py``: server tools are left out and named in a header;
  ``strict``, ``defer_loading`` and ``cache_control`` are accepted). ``tool_choice`` ``auto`` (or none given)
  sends them; ``none`` sends no tools.
* ``max_tokens`` (required; the front applies its ceiling), ``temperature``, ``top_p``, ``top_k`` carry over;
  ``stop_sequences`` becomes ``stop``. ``thinking``: ``enabled`` sets the worker's ``reasoning_budget`` to
  ``budget_tokens``, ``disabled`` passes ``enable_thinking: false`` to the chat template, ``adaptive`` leaves
  the template's default (no budget: the reply's ``max_tokens`` bounds it); ``display: "omitted"`` returns
  thinking blocks without their text, and every other display (``summarized``, Claude Code's ``updates`` and
  ``highlights``, newer ones) is accepted and changes nothing.
  ``output_config.effort`` becomes ``reasoning_effort`` (for templates that read it) and
  ``output_config.format`` a ``response_format`` JSON schema, which the worker enforces.
  ``tool_choice.disable_parallel_tool_use`` becomes ``parallel_tool_calls: false``: the worker returns the
  reply's first tool call only.
* ``metadata``, ``service_tier``, ``context_management`` and ``cache_control`` (anywhere) are accepted and
  change nothing (the worker caches prompt prefixes by itself).

* An ``image`` block in a user turn (source ``base64``, or ``url`` holding a ``data:`` URL) becomes a chat
  ``image_url`` part beside the turn's text parts, in their order (``images.py``: its limits; a remote URL is
  refused, nothing is fetched).
* An ``image`` block inside a ``tool_result`` (Claude Code's Read of an image file): a chat ``tool`` message
  carries text only (mlx-vlm's chat endpoint reads images from user messages alone), so the tool message holds
  the result's text and the images of a run of tool results open the user message that follows the run (the
  turn's next text joins it), in their order, under the same limits.

Refused with a 400 ``invalid_request_error``: document and other non-text content, images with a ``file``
source or a remote URL (``image_invalid``), tools that need
what a text model lacks (computer use), forced ``tool_choice`` (``any``, ``tool``), and top-level parameters
that ask for servers this machine does not have (``mcp_servers``, ``container``) or that it does not know.
``safeguards`` (Claude Code's auto mode asking Anthropic's classifier to judge the reply's tool calls) is
refused first, with its reason (``safeguards.py``).

The body arrives parsed by its declaration (``bodies.MessagesBody``, ``bodies.PromptBody`` for
``count_tokens``): the fields above are its whitelist, with their types and bounds, so what is checked here
is what a declaration cannot say (content blocks, roles, which thinking and tool choice can be honoured).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.anthropic.bodies import MessagesBody, OutputConfig, PromptBody, Thinking
from mlx_agent.gateway.anthropic.safeguards import refuse_safeguards
from mlx_agent.gateway.content_parts import MEDIA_PART_TYPES, media_refusal
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.images import check_data_url, data_url, image_part
from mlx_agent.gateway.tools import ToolSet, anthropic_tools

BILLING_HEADER = "x-anthropic-billing-header:"
BLOCK_JOIN = "\n\n"


@dataclass
class AnthropicRequest:
    """A translated Messages request: the worker's chat body, and what the reply must know."""

    chat: dict[str, Any]
    tools: ToolSet = field(default_factory=ToolSet)
    omit_thinking: bool = False  # thinking.display "omitted": thinking blocks carry no text


def to_chat(body: PromptBody) -> dict[str, Any]:
    """Return the chat-completions body for an Anthropic Messages request (``translate``'s chat part)."""
    return translate(body).chat


def translate(body: PromptBody) -> AnthropicRequest:
    """Translate a Messages request parsed by its declaration; raise ``RequestRefused`` if it cannot be honoured.

    A ``PromptBody`` that is not a ``MessagesBody`` is a ``count_tokens`` request: no reply limit, no sampling.
    """
    refuse_safeguards(body)  # before anything is read: Claude Code sends it again without the field
    if not body.model:
        raise refused(Code.INVALID_VALUE, "'model' is required and must be a string", param="model")
    out: dict[str, Any] = {"model": body.model}
    if isinstance(body, MessagesBody):
        if body.max_tokens is None:  # optional in the declaration, which count_tokens shares in part
            raise refused(
                Code.INVALID_VALUE, "'max_tokens' is required and must be a positive integer", param="max_tokens"
            )
        out["max_tokens"] = body.max_tokens

    chat: list[dict[str, Any]] = []
    system = _system_text(body.system)
    if system:
        chat.append({"role": "system", "content": system})
    for index, message in enumerate(body.messages):
        chat.extend(_message(message, index))
    out["messages"] = chat

    tools = anthropic_tools(body.tools)
    choice = body.tool_choice
    if _tool_choice(choice) != "none" and tools.functions:
        out["tools"] = tools.functions
        if choice is not None and choice.get("disable_parallel_tool_use") is True:
            out["parallel_tool_calls"] = False  # the worker returns the first call only
    if isinstance(body, MessagesBody):
        _sampling(body, out)
    _output_config(body.output_config, out)
    omit, template_kwargs = _thinking(body.thinking, out)
    if body.messages[-1].get("role") == "assistant":
        if chat[-1].get("tool_calls"):
            raise refused(
                Code.INVALID_VALUE,
                "the last message is an assistant tool_use: send its tool_result in a user message",
                param="messages",
            )
        template_kwargs["continue_final_message"] = True
        template_kwargs["add_generation_prompt"] = False
    if template_kwargs:
        out["chat_template_kwargs"] = template_kwargs
    return AnthropicRequest(out, tools, omit)


def _sampling(body: MessagesBody, out: dict[str, Any]) -> None:
    """Carry the sampling fields over (their types and bounds are the declaration's)."""
    for name in ("temperature", "top_p", "top_k", "stream"):
        value = getattr(body, name)
        if value is not None:
            out[name] = value
    if body.stop_sequences:
        out["stop"] = list(body.stop_sequences)


def _thinking(thinking: Thinking | None, out: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Apply ``thinking``; return whether its text is omitted from the reply, and the template arguments."""
    if thinking is None:
        return False, {}
    # Only "omitted" changes the reply; "summarized", "updates", "highlights" and any newer display ask for how
    # Anthropic presents its own reasoning, which a local model's plain reasoning text already is.
    omit = thinking.display == "omitted"
    if thinking.type == "enabled":
        if thinking.budget_tokens is None:
            raise refused(
                Code.INVALID_VALUE, "thinking.budget_tokens must be a positive integer", param="thinking.budget_tokens"
            )
        out["reasoning_budget"] = thinking.budget_tokens
        return omit, {}
    if thinking.type == "disabled":
        return omit, {"enable_thinking": False}
    if thinking.type == "adaptive":
        return omit, {}
    raise refused(
        Code.UNSUPPORTED_PARAMETER,
        f"thinking type {thinking.type!r} is not supported; use enabled, disabled or adaptive",
        param="thinking.type",
    )


def _output_config(config: OutputConfig | None, out: dict[str, Any]) -> None:
    """Apply ``output_config``: ``effort`` for templates that read it, ``format`` as an enforced JSON schema."""
    if config is None:
        return
    if config.effort is not None:
        out["reasoning_effort"] = config.effort
    if config.format is not None:
        schema = config.format["schema"]
        out["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def _system_text(system: object, param: str = "system") -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, list):
        raise refused(Code.INVALID_TYPE, "system content must be a string or a list of text blocks", param=param)
    texts = []
    for index, block in enumerate(system):
        if not isinstance(block, Mapping) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise refused(
                Code.UNSUPPORTED_CONTENT, "system content blocks must be text blocks", param=f"{param}.{index}"
            )
        if not block["text"].startswith(BILLING_HEADER):  # a per-turn nonce: it would defeat the prompt cache
            texts.append(block["text"])
    return BLOCK_JOIN.join(texts)


def _message(message: Mapping[str, Any], index: int) -> list[dict[str, Any]]:
    """Return the chat messages one Anthropic message becomes."""
    param = f"messages.{index}"
    role = message.get("role")
    if role not in ("user", "assistant", "system"):
        raise refused(
            Code.INVALID_VALUE, "a message's role must be 'user', 'assistant' or 'system'", param=f"{param}.role"
        )
    content = message.get("content")
    if role == "system":  # Claude Code puts some of its instructions here; they stay where they were sent
        return [{"role": "system", "content": _system_text(content, f"{param}.content")}]
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise refused(
            Code.INVALID_TYPE, "a message's content must be a string or a list of blocks", param=f"{param}.content"
        )
    for block_index, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise refused(
                Code.INVALID_TYPE,
                "each content block must be an object with a type",
                param=f"{param}.content.{block_index}",
            )
    if role == "user":
        return _user_blocks(content, param)
    return [_assistant_blocks(content, param)]


def _image(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Return the chat image part of an Anthropic ``image`` block, checked against the limits."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    if kind == "base64" and isinstance(source, Mapping):
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not media.startswith("image/") or not isinstance(data, str):
            raise refused(
                Code.IMAGE_INVALID,
                "a base64 image source needs an image/* media_type and string data",
                param=f"{where}.source",
            )
        param = f"{where}.source.data"
        return image_part(check_data_url(data_url(media, data), param), param)
    if kind == "url" and isinstance(source, Mapping):
        param = f"{where}.source.url"
        return image_part(check_data_url(source.get("url"), param), param)
    raise refused(
        Code.IMAGE_INVALID,
        f"image source type {kind!r} is not supported here: send base64 data or a data: URL (nothing is fetched)",
        param=f"{where}.source.type",
    )


def _unsupported_block(kind: str, param: str) -> RequestRefused:
    if kind == "image":
        return refused(
            Code.UNSUPPORTED_CONTENT, "an image is taken in a user turn's content or a tool_result only", param=param
        )
    if kind in MEDIA_PART_TYPES:
        return media_refusal(kind, param)
    if kind in ("document", "search_result", "container_upload"):
        return refused(
            Code.UNSUPPORTED_CONTENT, f"{kind} content is not supported: the local model reads text only", param=param
        )
    return refused(Code.UNSUPPORTED_CONTENT, f"content blocks of type '{kind}' are not supported here", param=param)


def _user_blocks(blocks: list[Mapping[str, Any]], param: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    parts: list[dict[str, Any]] = []  # the turn's parts once it holds an image: texts joined between images

    def text_part() -> None:
        if texts:
            parts.append({"type": "text", "text": BLOCK_JOIN.join(texts)})
            texts.clear()

    def flush() -> None:
        if parts:
            text_part()
            out.append({"role": "user", "content": list(parts)})
            parts.clear()
        elif texts:
            out.append({"role": "user", "content": BLOCK_JOIN.join(texts)})
            texts.clear()

    tool_images: list[dict[str, Any]] = []  # of the tool results just sent: the next user content opens with them
    for index, block in enumerate(blocks):
        kind = block["type"]
        where = f"{param}.content.{index}"
        if kind != "tool_result":
            parts.extend(tool_images)
            tool_images.clear()
        if kind == "text":
            texts.append(_text(block, where))
        elif kind == "image":
            text_part()
            parts.append(_image(block, where))
        elif kind == "tool_result":
            flush()
            tool_use_id = block.get("tool_use_id")
            if not isinstance(tool_use_id, str) or not tool_use_id:
                raise refused(Code.INVALID_VALUE, "a tool_result needs its tool_use_id", param=f"{where}.tool_use_id")
            text, images = _tool_result(block.get("content"), where)
            out.append({"role": "tool", "tool_call_id": tool_use_id, "content": text})
            tool_images.extend(images)
        else:
            raise _unsupported_block(kind, where)
    parts.extend(tool_images)
    flush()
    return out or [{"role": "user", "content": ""}]


def _assistant_blocks(blocks: list[Mapping[str, Any]], param: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for index, block in enumerate(blocks):
        kind = block["type"]
        where = f"{param}.content.{index}"
        if kind == "text":
            texts.append(_text(block, where))
        elif kind == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, Mapping):
                raise refused(
                    Code.INVALID_VALUE, "a tool_use block needs a string id and name and an object input", param=where
                )
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            continue
        else:
            raise _unsupported_block(kind, where)
    message: dict[str, Any] = {"role": "assistant", "content": BLOCK_JOIN.join(texts)}
    if calls:
        message["tool_calls"] = calls
    return message


def _text(block: Mapping[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise refused(Code.INVALID_TYPE, "a text block needs a string text", param=f"{where}.text")
    return text


def _tool_result(content: object, where: str) -> tuple[str, list[dict[str, Any]]]:
    """Return a tool_result's text (its text blocks joined) and its images as chat parts, in their order."""
    if content is None or isinstance(content, str):
        return content or "", []
    if not isinstance(content, list):
        raise refused(
            Code.INVALID_TYPE, "a tool_result's content must be a string or a list of blocks", param=f"{where}.content"
        )
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        inner = f"{where}.content.{index}"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text" and isinstance(block, Mapping):
            texts.append(_text(block, inner))
        elif kind == "image" and isinstance(block, Mapping):
            images.append(_image(block, inner))
        else:
            raise _unsupported_block(str(kind), inner)
    return BLOCK_JOIN.join(texts), images


def _tool_choice(tool_choice: dict[str, Any] | None) -> str:
    if tool_choice is None:
        return "auto"
    kind = tool_choice.get("type")
    if kind in ("any", "tool"):
        raise refused(
            Code.UNSUPPORTED_TOOL_CHOICE,
            f"tool_choice '{kind}' forces a tool call, which the local runtime cannot enforce; use 'auto' or 'none'",
            param="tool_choice",
        )
    if kind not in ("auto", "none"):
        raise refused(
            Code.UNSUPPORTED_TOOL_CHOICE, "tool_choice must be an object of type 'auto' or 'none'", param="tool_choice"
        )
    return str(kind)
