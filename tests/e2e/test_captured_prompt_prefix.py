"""The requests Claude Code and Codex CLI really send, captured live, render to prompts that only grow.

Each agent runs once inside a network namespace with only loopback against the capture server
(tests/agents_support.py), which records its first request. The test then continues that conversation the way
the agent does (an assistant turn with thinking or reasoning and a tool call, the tool's result with a
reminder, now and then a system message inside the conversation, a fresh billing nonce every turn), translates
every turn as the front does, and checks on every text template the suite ships that each turn's rendered
prompt starts with the previous one's (``tests/prompt_templates.assert_grows``), and on every real template of
the corpus without a listed limit through the worker's whole path, the agent's own tools included
(``tests/agent_sessions.assert_served_grows``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tests.agent_sessions import assert_served_grows
from tests.agents_support import (
    Namespace,
    agent_binary,
    capture,
    claude_env,
    clean_env,
    codex_home,
)
from tests.conftest import free_port
from tests.gateway_support import translate_messages, translate_responses
from tests.prompt_templates import assert_grows
from tests.template_corpus import corpus, known_limits

pytestmark = pytest.mark.e2e

TEMPLATES = ["chatml", "qwen3", "llama3", "raising", "dropping", "harmony"]
TURNS = 4
REAL_TEMPLATES = [t.name for t in corpus() if not known_limits(t.name)]


def claude_code_turns(first: dict[str, Any]) -> list[dict[str, Any]]:
    """Continue Claude Code's captured first request for ``TURNS`` turns, as Claude Code would."""
    bodies = [first]
    for k in range(1, TURNS):
        body = copy.deepcopy(bodies[-1])
        body["system"][0]["text"] = f"x-anthropic-billing-header: cc_version=2.1.332; cch={k:08x};"
        thinking = {"type": "thinking", "thinking": f"Step {k}.", "signature": "sig"}
        use = {"type": "tool_use", "id": f"toolu_{k}", "name": "Read", "input": {"file_path": f"/repo/m{k}.py"}}
        body["messages"].append({"role": "assistant", "content": [thinking, {"type": "text", "text": "Reading."}, use]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": f"print({k})"}
        left = {
            "type": "text",
            "text": f"<system-reminder>\n<total_tokens>{15000000 - k * 900} tokens left</total_tokens>",
        }
        body["messages"].append({"role": "user", "content": [result, left]})
        if k % 2 == 0:
            body["messages"].append({"role": "system", "content": f"Note {k}: keep going."})
        bodies.append(body)
    return bodies


def codex_turns(first: dict[str, Any]) -> list[dict[str, Any]]:
    """Continue Codex's captured first request for ``TURNS`` turns, as Codex would."""
    bodies = [first]
    for k in range(1, TURNS):
        body = copy.deepcopy(bodies[-1])
        body["input"] += [
            {"type": "reasoning", "summary": [], "encrypted_content": f"opaque-{k}"},
            {"type": "function_call", "call_id": f"c{k}", "name": "exec_command", "arguments": f'{{"cmd": "ls {k}"}}'},
            {"type": "function_call_output", "call_id": f"c{k}", "output": f"m{k}.py"},
        ]
        if k % 2 == 0:
            body["input"].append(
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Go on."}]}
            )
        bodies.append(body)
    return bodies


def test_claude_code_sessions_render_growing_prompts(tmp_path: Path, namespace: Namespace) -> None:
    """Claude Code's real first request, continued, renders a growing prompt on every template."""
    port = free_port()
    env = claude_env(tmp_path / "home", port)
    argv = [str(agent_binary("claude")), "-p", "Say hi.", "--output-format", "json", "--model", "claude-sonnet-4-5"]
    sent = capture(namespace, port, argv, env, tmp_path)
    first = next(r["body"] for r in sent if r["path"].startswith("/v1/messages") and r["body"].get("tools"))
    assert first["system"][0]["text"].startswith("x-anthropic-billing-header")
    bodies = [translate_messages(body).chat for body in claude_code_turns(first)]
    chats = [body["messages"] for body in bodies]
    assert any(m["role"] == "system" for m in chats[-1][1:])  # a late system message is in the session
    for name in TEMPLATES:
        assert_grows(name, chats)
    for name in REAL_TEMPLATES:
        assert_served_grows(name, bodies)


def test_codex_sessions_render_growing_prompts(tmp_path: Path, namespace: Namespace) -> None:
    """Codex's real first request, continued, renders a growing prompt on every template."""
    port = free_port()
    home = codex_home(tmp_path / "codex-home", port)
    env = clean_env(tmp_path, CODEX_HOME=str(home), LOCAL_API_KEY="unused")
    argv = [str(agent_binary("codex")), "exec", "--skip-git-repo-check", "Say hi."]
    sent = capture(namespace, port, argv, env, tmp_path)
    first = next(r["body"] for r in sent if r["path"] == "/v1/responses")
    bodies = [translate_responses(body, default_model="gpt-5-codex").chat for body in codex_turns(first)]
    chats = [body["messages"] for body in bodies]
    assert any(m["role"] == "system" for m in chats[-1][1:])
    for name in TEMPLATES:
        assert_grows(name, chats)
    for name in REAL_TEMPLATES:
        assert_served_grows(name, bodies)
