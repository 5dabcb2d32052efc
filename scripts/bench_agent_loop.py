"""Measure how much of an agent session's prompt the worker's cache serves, turn by turn, on each API.

Two sessions, each sent through ``/v1/messages``, ``/v1/responses`` and ``/v1/chat/completions`` of an eager
front over the wrapped worker on a tiny random-weight model (built locally, one layer of width 32, with a
Qwen3-style template that renders tools and tool calls, context widened; or ``--model DIR``):

* shaped like Claude Code's: a long system prompt (on Messages its first block is the billing header, with a
  fresh nonce every turn), a dozen tools, and every turn an assistant reply with thinking and a tool call, the
  tool's result, and a reminder system message after it (a token countdown), with a user message now and then;
* shaped like Codex's: long instructions, a developer message and the environment context first, then every
  turn reasoning, an ``exec_command`` call and its output, with an answer and a new user message now and then.

Claude Code's history grows past 30k tokens over 30 turns, Codex's (shorter outputs) past 15k; the whole run
takes under a minute on a 2-core CPU (about 25 s here). Each turn prints the prompt, cached and newly prefilled
tokens. Targets: from turn 2 on every turn caches >= 95% of the previous turn's prompt, and over the session
the prefilled tokens are <= 1.1 x the tokens actually new (each turn's prompt less the previous one's).

Usage (from the repository root): ``python scripts/bench_agent_loop.py [--turns N] [--model DIR]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.gateway_support import Gateway  # noqa: E402  (after the checkout is on sys.path)

sys.path.insert(0, str(REPO / "scripts"))
from bench_gateway import front  # noqa: E402

SHARE_TARGET = 0.95
PREFILL_TARGET = 1.1
WINDOW = 131072
REPLY_TOKENS = 4
# Qwen3-style (tests/prompt_templates.py) with the offered tools written first, as real templates do.
TOOLS_HEADER = (
    "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n' }}{%- for tool in tools %}{{- tool | tojson }}"
    "{{- '\\n' }}{%- endfor %}{{- '<|im_end|>\\n' }}{%- endif %}"
)
PROSE = (
    "Read the files before you change them, keep edits small, run the tests that cover the change, and say "
    "plainly what you did and what you did not do. Never guess the content of a file you have not read. "
)
FILE = "def handler(request):\n    body = request.json()\n    return {'status': 'ok', 'items': body.get('items', [])}\n"


@dataclass
class Event:
    """One message of a session, in neutral form: each API's builder writes it its own way."""

    kind: str  # "user", "assistant", "tool", "system"
    text: str = ""
    thinking: str = ""
    call: tuple[str, str, dict[str, Any]] | None = None  # (id, name, arguments)


@dataclass
class Session:
    """A session's fixed parts and its events, turn by turn (turn k is events[: ends[k]])."""

    name: str
    system: str
    tools: list[dict[str, Any]]
    events: list[Event]
    ends: list[int]
    nonce: bool  # the Messages system starts with Claude Code's per-turn billing header


def claude_code(turns: int) -> Session:
    """Return a Claude Code-shaped session of ``turns`` turns."""
    tools = [
        {"name": n, "description": f"The {n} tool. " + PROSE * 2, "input_schema": {"type": "object"}}
        for n in ("Read", "Edit", "Write", "Bash", "Grep", "Glob", "TodoWrite", "WebFetch", "Task", "NotebookEdit")
    ]
    events = [Event("user", "<system-reminder>\nThe date is 2026-12-01.\n</system-reminder>\n\nFix the failing test.")]
    ends = [len(events)]
    for k in range(1, turns):
        name = ("Read", "Bash", "Edit", "Grep")[k % 4]
        events.append(
            Event(
                "assistant",
                f"Step {k}: using {name}.",
                f"I should use {name} now.",
                (f"toolu_{k}", name, {"path": f"src/m{k}.py"}),
            )
        )
        events.append(Event("tool", f"call toolu_{k}: " + FILE * 12, call=(f"toolu_{k}", name, {})))
        events.append(
            Event(
                "system",
                f"<system-reminder>Token usage: {k * 1100}/200000; {200000 - k * 1100} remaining</system-reminder>",
            )
        )
        if k % 7 == 0:
            events.append(Event("user", f"Also check module {k}, please."))
        ends.append(len(events))
    return Session(
        "claude-code",
        "You are Claude Code, Anthropic's official CLI for Claude. " + PROSE * 30,
        tools,
        events,
        ends,
        True,
    )


def codex(turns: int) -> Session:
    """Return a Codex-shaped session of ``turns`` turns."""
    tools = [
        {"name": n, "description": f"The {n} tool. " + PROSE, "input_schema": {"type": "object"}}
        for n in ("exec_command", "write_stdin", "apply_patch", "update_plan", "view_image")
    ]
    events = [
        Event("system", "<permissions instructions>danger-full-access; approvals never</permissions instructions>"),
        Event("user", "<environment_context><cwd>/work/repo</cwd><shell>bash</shell></environment_context>"),
        Event("user", "Make the failing test pass."),
    ]
    ends = [len(events)]
    for k in range(1, turns):
        events.append(
            Event(
                "assistant", "", f"Run step {k}.", (f"call_{k}", "exec_command", {"cmd": f"sed -n 1,80p src/m{k}.py"})
            )
        )
        events.append(Event("tool", "Chunk ID: 1\nOutput:\n" + FILE * 6, call=(f"call_{k}", "exec_command", {})))
        if k % 6 == 0:
            events.append(Event("assistant", f"Module {k} looks fine."))
            events.append(Event("user", "Go on."))
        ends.append(len(events))
    return Session("codex", "You are Codex, a coding agent. " + PROSE * 30, tools, events, ends, False)


# -- writing a session's turn for each API --------------------------------------------------------------------


def messages_body(session: Session, turn: int, events: list[Event]) -> dict[str, Any]:
    """Return the Anthropic Messages body of one turn."""
    messages: list[dict[str, Any]] = []
    for event in events:
        if event.kind == "assistant":
            blocks: list[dict[str, Any]] = []
            if event.thinking:
                blocks.append({"type": "thinking", "thinking": event.thinking, "signature": "sig"})
            if event.text:
                blocks.append({"type": "text", "text": event.text})
            if event.call:
                blocks.append({"type": "tool_use", "id": event.call[0], "name": event.call[1], "input": event.call[2]})
            messages.append({"role": "assistant", "content": blocks})
        elif event.kind == "system":
            messages.append({"role": "system", "content": event.text})
        else:
            block = (
                {"type": "tool_result", "tool_use_id": event.call[0], "content": event.text}
                if event.kind == "tool" and event.call
                else {"type": "text", "text": event.text}
            )
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block]})
    system = [{"type": "text", "text": session.system, "cache_control": {"type": "ephemeral"}}]
    if session.nonce:
        system.insert(0, {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.332; cch={turn:08x};"})
    return {
        "model": "org/tiny",
        "max_tokens": REPLY_TOKENS,
        "system": system,
        "tools": session.tools,
        "messages": messages,
        "temperature": 0,
    }


def responses_body(session: Session, turn: int, events: list[Event]) -> dict[str, Any]:
    """Return the OpenAI Responses body of one turn."""
    items: list[dict[str, Any]] = []
    for event in events:
        if event.kind == "assistant":
            if event.thinking:
                items.append({"type": "reasoning", "summary": [], "encrypted_content": f"opaque-{len(items)}"})
            if event.text:
                items.append(
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": event.text}]}
                )
            if event.call:
                call_id, name, arguments = event.call
                items.append(
                    {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(arguments)}
                )
        elif event.kind == "tool" and event.call:
            items.append({"type": "function_call_output", "call_id": event.call[0], "output": event.text})
        else:
            role = "developer" if event.kind == "system" else "user"
            items.append({"type": "message", "role": role, "content": [{"type": "input_text", "text": event.text}]})
    tools = [
        {"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
        for t in session.tools
    ]
    return {
        "model": "org/tiny",
        "instructions": session.system,
        "input": items,
        "tools": tools,
        "max_output_tokens": REPLY_TOKENS,
        "temperature": 0,
        "store": False,
        "prompt_cache_key": session.name,
    }


def chat_body(session: Session, turn: int, events: list[Event]) -> dict[str, Any]:
    """Return the chat completions body of one turn."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": session.system}]
    for event in events:
        if event.kind == "assistant":
            message: dict[str, Any] = {"role": "assistant", "content": event.text}
            if event.call:
                call_id, name, arguments = event.call
                message["tool_calls"] = [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
                ]
            messages.append(message)
        elif event.kind == "tool" and event.call:
            messages.append({"role": "tool", "tool_call_id": event.call[0], "content": event.text})
        else:
            messages.append({"role": event.kind, "content": event.text})
    tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
        }
        for t in session.tools
    ]
    return {"model": "org/tiny", "max_tokens": REPLY_TOKENS, "temperature": 0, "messages": messages, "tools": tools}


def messages_usage(doc: dict[str, Any]) -> tuple[int, int]:
    usage = doc["usage"]
    return usage["input_tokens"] + usage["cache_read_input_tokens"], usage["cache_read_input_tokens"]


def responses_usage(doc: dict[str, Any]) -> tuple[int, int]:
    usage = doc["usage"]
    return usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"]


def chat_usage(doc: dict[str, Any]) -> tuple[int, int]:
    usage = doc["usage"]
    return usage["prompt_tokens"], (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)


Builder = Callable[[Session, int, list[Event]], dict[str, Any]]
Usage = Callable[[dict[str, Any]], tuple[int, int]]
APIS: list[tuple[str, Builder, Usage]] = [
    ("/v1/messages", messages_body, messages_usage),
    ("/v1/responses", responses_body, responses_usage),
    ("/v1/chat/completions", chat_body, chat_usage),
]


def run(gateway: Gateway, session: Session, path: str, build: Builder, usage_of: Usage) -> dict[str, Any]:
    """Send every turn of ``session`` through ``path``; print each turn; return the session's figures."""
    print(f"{session.name} via {path}:")
    session = replace(session, system=f"Session {session.name} via {path}. {session.system}")  # no shared cache
    previous = 0
    worst = 1.0
    prefilled = 0
    for turn, end in enumerate(session.ends, 1):
        reply = gateway.request(
            "POST", path, build(session, turn, session.events[:end]), {"anthropic-version": "2023-06-01"}
        )
        if reply.status != 200:
            raise RuntimeError(f"POST {path}: {reply.status} {reply.body[:300]!r}")
        prompt, cached = usage_of(reply.json())
        fresh = prompt - cached
        prefilled += fresh
        note = ""
        if previous:
            share = cached / previous
            worst = min(worst, share)
            note = f"  {share:6.1%} of turn {turn - 1}'s prompt"
        figures = f"prompt {prompt:6d}  cached {cached:6d}  prefilled {fresh:5d}  new {prompt - previous:5d}"
        print(f"  turn {turn:2d}: {figures}{note}")
        previous = prompt
    ratio = prefilled / previous
    ok = worst >= SHARE_TARGET and ratio <= PREFILL_TARGET
    print(
        f"  worst share {worst:.1%} (target >= {SHARE_TARGET:.0%}); prefilled {prefilled} of {previous} new tokens "
        f"= {ratio:.3f}x (target <= {PREFILL_TARGET}x)  {'PASS' if ok else 'FAIL'}"
    )
    return {"worst_share": round(worst, 4), "prefilled": prefilled, "new": previous, "ratio": round(ratio, 4), "ok": ok}


def bench_model(directory: Path) -> Path:
    """Build a tiny model with the Qwen3-style tools template and a wide context."""
    from tests.fixtures.tiny_model import build_tiny_model
    from tests.prompt_templates import QWEN3_TEMPLATE

    # One layer of width 32: attention over a 30k-token history is what costs on a CPU, and the cache does not care.
    model = build_tiny_model(directory / "tiny-llama", num_layers=1, hidden_size=32)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": WINDOW}))
    tokenizer = json.loads((model / "tokenizer_config.json").read_text())
    tokenizer.update(chat_template=TOOLS_HEADER + QWEN3_TEMPLATE, model_max_length=WINDOW)
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    return model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--model", type=Path, help="a local MLX model directory (default: build a tiny one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-agent-loop-") as tmp:
        directory = Path(tmp)
        model = args.model or bench_model(directory)
        gateway = front(directory / "front", model.resolve(), REPLY_TOKENS, eager=True)
        try:
            results = {
                f"{session.name} {path}": run(gateway, session, path, build, usage_of)
                for session in (claude_code(args.turns), codex(args.turns))
                for path, build, usage_of in APIS
            }
        finally:
            gateway.stop()
    print(json.dumps({name: "PASS" if r["ok"] else "FAIL" for name, r in results.items()}))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
