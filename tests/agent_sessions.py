"""Append-only agent sessions, as the worker receives them, and the worker's prompt for each turn (no tests here).

Three shapes, each ten requests long, each request the previous one plus the reply and what followed it:

* ``claude_code``: Anthropic Messages bodies translated as the front translates them (``translate_messages``):
  parallel calls with ``toolu_`` ids, a ``<system-reminder>`` after each tool result, thinking blocks, an Edit
  whose strings end in newlines, and a new user question half-way;
* ``codex``: Responses bodies translated (``translate_responses``): developer messages (first and late), two user
  messages in a row, ``call_`` ids, reasoning items, parallel calls;
* ``opencode``: plain chat completions with ``tools``: two leading system messages, ids as mlx_lm's replies
  give them (uuid strings), ``content: null`` beside calls, arguments as JSON strings.

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
from tests.template_corpus import Template, template

TURNS = 10
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


def claude_code() -> list[dict[str, Any]]:
    """Return the chat bodies of a Claude Code session, translated from its Messages bodies as the front does."""
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [_reminder("The date is 2026-12-04."), {"type": "text", "text": "Fix the failing test."}],
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
        messages.append({"role": "user", "content": [*results, _reminder(f"Turn {turn}: keep going.")]})
    return bodies


def codex() -> list[dict[str, Any]]:
    """Return the chat bodies of a Codex session, translated from its Responses bodies as the front does."""

    def message(role: str, text: str) -> dict[str, Any]:
        kind = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}

    items: list[dict[str, Any]] = [
        message("developer", "<permissions instructions>workspace-write</permissions instructions>"),
        message("user", "<environment_context>cwd: /repo</environment_context>"),
        message("user", "Make the tests pass."),
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
            items.append({"type": "function_call_output", "call_id": call, "output": f"output {turn}\n"})
        if turn in (3, 7):  # a late developer message right after the tool outputs
            items.append(message("developer", f"<turn_context>approval: never ({turn})</turn_context>"))
    return bodies


def opencode() -> list[dict[str, Any]]:
    """Return the chat bodies of an opencode session: chat completions with tools, ids as mlx_lm's replies give."""
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
            messages.append({"role": "user", "content": [{"type": "text", "text": "Fix it, please."}]})
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
