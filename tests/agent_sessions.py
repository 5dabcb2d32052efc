"""Append-only agent sessions, as the worker receives them, and the worker's prompt for each turn (no tests here).

Three shapes, each ten requests long, each request the previous one plus the reply and what followed it:

* ``claude_code``: Anthropic Messages bodies translated as the front translates them (``translate_messages``):
  parallel calls with ``toolu_`` ids, a ``<system-reminder>`` after each tool result, thinking blocks, an Edit
  whose strings end in newlines, and a new user question half-way;
* ``codex``: Responses bodies translated (``translate_responses``): developer messages (first and late), two user
  messages in a row, ``call_`` ids, reasoning items, parallel calls;
* ``opencode``: plain chat completions with ``tools``: two leading system messages, ids as mlx_lm's replies
  give them (uuid strings), ``content: null`` beside calls, arguments as JSON strings.

Each takes ``images=True`` (``IMAGE_SHAPES``) for a model with vision: a screenshot in the first user message,
and an image in a tool result where the API allows one (Claude Code's ``tool_result``, Codex's call output; the
front moves it into the user message after the results, as mlx-vlm reads images from user messages only), or
(opencode, chat completions: a tool message is text) a screenshot with the new question.
``vlm_served_prompts`` renders them through the mlx-vlm worker's path in-process (mlx_vlm's request parsing,
``InstructionPlacer``, ``AdaptedRender`` over mlx_vlm's own ``apply_chat_template``).

``served_prompts`` renders every request through the worker's own path: ``prepare_body`` (which adapts the
conversation to the template: ``runtime/serving/conversation``), then the template with the request's tools and
the generation prompt, as ``tokenizer.apply_chat_template(..., add_generation_prompt=True)`` does in mlx_lm.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mlx_agent.errors import HttpError, TemplateFailed
from mlx_agent.runtime.serving.conversation import Conversations
from mlx_agent.runtime.serving.errors_http import from_generation_error
from mlx_agent.runtime.serving.limits import Limits
from mlx_agent.runtime.serving.request_options import Served, prepare_body
from mlx_agent.runtime.serving.system_turns import common_prefix
from tests.gateway_support import translate_messages, translate_responses
from tests.media_traps import png
from tests.template_corpus import Template, template

TURNS = 10
PICTURED = 4  # the turn whose tool result holds an image (Claude Code's Read of a PNG, Codex's call output)
QUESTION = 5  # turn 5 (1-based) is answered and a new question follows: request index 5 brings it
EDIT_OLD, EDIT_NEW = "x = 1\n", "x = 2\n"  # an Edit's strings end in newlines, as real edits do

ANTHROPIC_TOOLS = [
    {
        "name": "Read",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
    },
    {
        "name": "Edit",
        "description": "Replace a string in a file.",
        "input_schema": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
            },
            "required": ["file_path", "old_string", "new_string"],
        },
    },
]
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
]


def _reminder(text: str) -> dict[str, Any]:
    return {"type": "text", "text": f"<system-reminder>\n{text}\n</system-reminder>"}


@functools.cache
def screenshot() -> str:
    """Return the sessions' image: a small PNG as a data URL."""
    return png(16, 16)


def _anthropic_image() -> dict[str, Any]:
    data = screenshot().split(",", 1)[1]
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def claude_code(images: bool = False) -> list[dict[str, Any]]:
    """Return the chat bodies of a Claude Code session, translated from its Messages bodies as the front does."""
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                _reminder("The date is 2026-12-04."),
                *([_anthropic_image()] if images else []),
                {"type": "text", "text": "Fix the failing test."},
            ],
        }
    ]
    bodies = []
    for turn in range(1, TURNS + 1):
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 32000,
            "system": [
                {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.3; cch={turn:08x};"},
                {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
            ],
            "tools": ANTHROPIC_TOOLS,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [dict(m) for m in messages],
        }
        bodies.append(translate_messages(body).chat)
        thinking = {"type": "thinking", "thinking": f"Thought {turn}.", "signature": "sig"}
        if turn == QUESTION:  # an answer, then the user's next question
            messages.append({"role": "assistant", "content": [thinking, {"type": "text", "text": "Fixed it."}]})
            messages.append({"role": "user", "content": "Now bump x as well."})
            continue
        uses: list[dict[str, Any]] = [
            {"type": "tool_use", "id": f"toolu_01{turn}A{'x' * 20}", "name": "Read", "input": {"file_path": "a.py"}},
            {"type": "tool_use", "id": f"toolu_01{turn}B{'y' * 20}", "name": "Read", "input": {"file_path": "b.py"}},
        ]
        if turn % 3 == 0:
            edit = {"file_path": "a.py", "old_string": EDIT_OLD, "new_string": EDIT_NEW}
            uses = [{"type": "tool_use", "id": f"toolu_01{turn}E{'z' * 20}", "name": "Edit", "input": edit}]
        messages.append({"role": "assistant", "content": [thinking, {"type": "text", "text": "Looking."}, *uses]})
        results: list[dict[str, Any]] = [
            {
                "type": "tool_result",
                "tool_use_id": use["id"],
                "content": f"Result of {use['input']['file_path']} {turn}.",
            }
            for use in uses
        ]
        if images and turn == PICTURED:  # the Read of an image file: the picture in its result
            text = {"type": "text", "text": "Read screenshot.png"}
            results[-1] = {**results[-1], "content": [text, _anthropic_image()]}
        messages.append({"role": "user", "content": [*results, _reminder(f"Turn {turn}: keep going.")]})
    return bodies


def codex(images: bool = False) -> list[dict[str, Any]]:
    """Return the chat bodies of a Codex session, translated from its Responses bodies as the front does."""

    def message(role: str, text: str) -> dict[str, Any]:
        kind = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}

    image = {"type": "input_image", "image_url": screenshot()} if images else None
    ask = message("user", "Make the tests pass.")
    items: list[dict[str, Any]] = [
        message("developer", "<permissions instructions>workspace-write</permissions instructions>"),
        message("user", "<environment_context>cwd: /repo</environment_context>"),
        {**ask, "content": [*ask["content"], image]} if image else ask,
    ]
    bodies = []
    for turn in range(1, TURNS + 1):
        body = {
            "model": "gpt-5-codex",
            "instructions": "You are Codex, a coding agent.",
            "input": [dict(item) for item in items],
            "tools": [
                {
                    "type": "function",
                    "name": "shell",
                    "description": "Run a command.",
                    "parameters": {"type": "object", "properties": {"command": {"type": "array"}}},
                }
            ],
            "reasoning": {"effort": "medium", "summary": "auto"},
            "store": False,
            "stream": True,
        }
        bodies.append(translate_responses(body, default_model="gpt-5-codex").chat)
        items.append({"type": "reasoning", "summary": [], "encrypted_content": f"opaque-{turn}"})
        if turn == QUESTION:  # an answer, then two user messages in a row
            items += [
                message("assistant", "The tests pass."),
                message("user", "<user_instructions>Be brief.</user_instructions>"),
                message("user", "Now add a changelog entry."),
            ]
            continue
        calls = [f"call_{turn}a{'Q' * 22}"] + ([f"call_{turn}b{'R' * 22}"] if turn % 2 == 0 else [])
        for call in calls:
            arguments = json.dumps({"command": ["cat", f"f{turn}.py"]})
            items.append({"type": "function_call", "call_id": call, "name": "shell", "arguments": arguments})
        for call in calls:
            output: str | list[dict[str, Any]] = f"output {turn}\n"
            if image and turn == PICTURED and call == calls[-1]:  # view_image: the picture in the output
                output = [{"type": "input_text", "text": f"output {turn}\n"}, image]
            items.append({"type": "function_call_output", "call_id": call, "output": output})
        if turn in (3, 7):  # a late developer message right after the tool outputs
            items.append(message("developer", f"<turn_context>approval: never ({turn})</turn_context>"))
    return bodies


def opencode(images: bool = False) -> list[dict[str, Any]]:
    """Return the chat bodies of an opencode session: chat completions with tools, ids as mlx_lm's replies give."""
    picture = [{"type": "image_url", "image_url": {"url": screenshot()}}] if images else []
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are opencode, an interactive CLI agent."},
        {"role": "system", "content": "Environment: linux, /repo."},
        {"role": "user", "content": "Why does the build fail?"},
    ]
    bodies = []
    for turn in range(1, TURNS + 1):
        bodies.append({"model": "default_model", "messages": [dict(m) for m in messages], "tools": CHAT_TOOLS})
        if turn == QUESTION:  # an answer, then a new question
            messages.append({"role": "assistant", "content": "A missing import."})
            messages.append({"role": "user", "content": [*picture, {"type": "text", "text": "Fix it, please."}]})
            continue
        ids = [str(uuid.uuid5(uuid.NAMESPACE_OID, f"{turn}-{n}")) for n in range(2 if turn % 2 else 1)]
        calls = [
            {
                "id": i,
                "type": "function",
                "function": {"name": "read", "arguments": json.dumps({"path": f"{i[:4]}.py"})},
            }
            for i in ids
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        messages += [{"role": "tool", "tool_call_id": i, "content": f"contents of {i[:4]}.py"} for i in ids]
    return bodies


SHAPES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "claude_code": claude_code,
    "codex": codex,
    "opencode": opencode,
}
IMAGE_SHAPES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    name: functools.partial(build, images=True)
    for name, build in (("claude_code", claude_code), ("codex", codex), ("opencode", opencode))
}


@dataclass(frozen=True)
class ServedPrompt:
    """One turn's prompt as the worker renders it (``prompt``), and its cut: the part the next turn must keep."""

    prompt: str = ""
    cut: str = ""  # the longest common prefix of the rendering with and without the generation prompt
    error: HttpError | None = None  # the 400 the worker answers instead


def template_render(template: Template) -> Any:
    """Return the worker's ``Render`` for ``template`` (messages, tools, generation prompt)."""

    def render(messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, generation: bool) -> str:
        return template.render(messages, tools=tools, generation=generation)

    return render


def served_prompts(
    template: Template, bodies: Sequence[dict[str, Any]], conversations: Conversations | None = None
) -> list[ServedPrompt]:
    """Render each body as the worker does: prepared (and adapted) by ``prepare_body``, then the template."""
    conversations = conversations or Conversations(template_render(template))
    served = Served(frozenset({"default_model", "claude-sonnet-4-5", "gpt-5-codex"}), Limits(), conversations)
    out = []
    for body in bodies:
        try:
            prepared, _ = prepare_body(json.loads(json.dumps(body)), served, chat=True)
            tools = prepared.get("tools")
            prompt = conversations.render(prepared["messages"], tools, True)
            bare = conversations.render(prepared["messages"], tools, False)
        except HttpError as error:  # refused before rendering
            out.append(ServedPrompt(error=error))
            continue
        except TemplateFailed as error:  # refused by the template: answered as the worker answers it
            out.append(ServedPrompt(error=from_generation_error(error)))
            continue
        out.append(ServedPrompt(prompt, prompt[: common_prefix(prompt, bare)]))
    return out


@functools.cache
def conversations_of(name: str) -> Conversations:
    """Return the worker's adapter for the corpus template ``name``, decided once (as a worker decides it)."""
    return Conversations(template_render(template(name)))


def assert_served_grows(name: str, bodies: Sequence[dict[str, Any]]) -> None:
    """Check every body renders through the worker's path and each prompt starts with the previous one's cut."""
    previous = ""
    for prompt in served_prompts(template(name), bodies, conversations_of(name)):
        assert prompt.error is None, (name, prompt.error.message)
        assert prompt.prompt.startswith(previous), (name, previous, prompt.prompt)
        previous = prompt.cut


class TemplateProcessor:
    """A processor as mlx_vlm's rendering sees one: a chat template, rendered by the corpus ``Template``."""

    def __init__(self, template: Template) -> None:
        self.template = template
        self.chat_template = template.source

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tokenize: bool = False,
        add_generation_prompt: bool = True,
        tools: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        """Render ``messages`` with the template (as a processor's ``apply_chat_template(tokenize=False)``)."""
        assert not tokenize
        return self.template.render(messages, tools=tools, generation=add_generation_prompt, **kwargs)


# The corpus templates that take images (found by rendering an image part: each writes its placeholder), with the
# model type their checkpoints give mlx_vlm (which decides how mlx_vlm writes an image part) and the placeholder.
VISION = {
    "Qwen3.5-4B": ("qwen3_5", "<|vision_start|><|image_pad|><|vision_end|>"),
    "google-gemma-3-it": ("gemma3", "<start_of_image>"),
    "google-gemma-4-31B-it": ("gemma4", "<|image|>"),
    "Mistral-Small-3.2-24B-Instruct-2506": ("mistral3", "[IMG]"),
}


def vlm_served_prompts(
    template: Template, model_type: str, bodies: Sequence[dict[str, Any]], *, before: bool = False
) -> list[ServedPrompt]:
    """Render each body as the mlx-vlm worker's chat endpoint does, for a checkpoint of ``model_type``.

    mlx_vlm parses the request (``ChatRequest``) and reads each message (``_chat_message_to_prompt``: a user
    message keeps its image parts), our ``InstructionPlacer`` joins the leading system messages, mlx_vlm applies
    ``tool_choice``, and ``AdaptedRender`` adapts and renders through mlx_vlm's ``apply_chat_template`` (which
    writes each image part as the checkpoint's message format wants it, and the template its placeholder).
    ``before``: as the worker did before the adapter: late system messages placed by probes without tools, no
    other step, and a template's refusal a 500 (``error`` holds a 500).
    """
    from fastapi import HTTPException
    from mlx_vlm.prompt_utils import apply_chat_template
    from mlx_vlm.server.openai import _ensure_effective_input
    from mlx_vlm.server.request_normalization import _chat_message_to_prompt, _normalize_instruction_messages
    from mlx_vlm.server.schemas import ChatRequest
    from mlx_vlm.tools import _prepare_chat_tool_choice

    from mlx_agent.runtime.entries.mlx_vlm_server import (
        AdaptedRender,
        InstructionPlacer,
        TemplateRefusal,
        vlm_tools_render,
    )
    from mlx_agent.runtime.serving.system_turns import SystemTurns, place

    processor, config = TemplateProcessor(template), {"model_type": model_type}
    placer = InstructionPlacer(_normalize_instruction_messages, lambda: (processor, config))
    render: Any = apply_chat_template if before else AdaptedRender(apply_chat_template)
    tools_render = vlm_tools_render(processor, config, apply_chat_template)
    turns = SystemTurns(lambda messages, generation: tools_render(messages, None, generation))
    out = []
    for body in bodies:
        request = ChatRequest.model_validate(json.loads(json.dumps(body)))
        messages = [_chat_message_to_prompt(m.model_dump(exclude_none=True)) for m in request.messages]  # type: ignore[no-untyped-call]
        placer(messages)
        try:
            images = [
                part
                for m in messages
                if m["role"] == "user" and isinstance(m["content"], list)
                for part in m["content"]
                if isinstance(part, dict) and part.get("type") in ("image_url", "input_image")
            ]
            _ensure_effective_input(messages, images=images)  # type: ignore[no-untyped-call]
        except HTTPException as refusal:  # mlx_vlm's own 400: nothing to answer
            out.append(ServedPrompt(error=HttpError(refusal.status_code, str(refusal.detail))))
            continue
        if before:
            messages = place(messages, turns.way)
        messages, tools, _ = _prepare_chat_tool_choice(messages, request.tools, request.tool_choice)  # type: ignore[no-untyped-call]
        try:
            prompt = render(processor, config, messages, add_generation_prompt=True, tools=tools)
            bare = render(processor, config, messages, add_generation_prompt=False, tools=tools)
        except TemplateRefusal as refusal:
            out.append(ServedPrompt(error=refusal.error))
            continue
        except Exception as error:  # before: mlx_vlm's endpoint answered it 500
            out.append(ServedPrompt(error=HttpError(500, str(error))))
            continue
        out.append(ServedPrompt(prompt, prompt[: common_prefix(prompt, bare)]))
    return out
