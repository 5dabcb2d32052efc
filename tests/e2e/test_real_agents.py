"""Claude Code and Codex CLI, unmodified, finish a tool round trip against `serve start`, eager and JIT, keyed or not.

Each runs inside a network namespace that has only loopback (tests/agents_support.py), against a scripted
tiny model that calls the agent's own file tool (Claude Code: Read; Codex: exec_command running cat) and,
given the tool's result, answers with a word it could only reach after a tool round. The agent exits 0 on that
answer only if every request it sent was accepted and every reply was well formed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agents_support import (
    Namespace,
    agent_binary,
    capture,
    claude_env,
    claude_reads,
    clean_env,
    codex_exec,
    codex_home,
    inside,
    scripted_agent_model,
    serve,
)
from tests.conftest import Agent, free_port
from tests.gateway_support import translate_messages, translate_responses

pytestmark = pytest.mark.e2e

ANSWER = "Basil"
KEY = "sk-local-test-key"
MODES = [
    pytest.param([], None, id="eager"),
    pytest.param(["--jit"], None, id="jit"),
    pytest.param([], KEY, id="eager-keyed"),
    pytest.param(["--jit"], KEY, id="jit-keyed"),
]


@pytest.mark.parametrize(("extra", "key"), MODES)
def test_claude_code_reads_a_file_and_finishes(
    agent: Agent, tmp_path: Path, namespace: Namespace, extra: list[str], key: str | None
) -> None:
    """`claude -p` calls its Read tool on the model's word, reads the file, and ends on the model's answer."""
    note = tmp_path / "note.txt"
    note.write_text("The secret word is basil.\n")
    model = scripted_agent_model(tmp_path / "model", "Read", {"file_path": str(note)}, ANSWER)
    cli = inside(agent, namespace)
    port = serve(cli, model, extra, key, tmp_path)
    home = tmp_path / "claude-home"
    home.mkdir()
    done = namespace.run(claude_reads(note), claude_env(home, port, key), tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, result
    assert result["num_turns"] >= 2  # the answer comes only after the Read tool's result went back
    assert cli.run("serve", "stop", "--port", str(port)).rc == 0


@pytest.mark.parametrize(("extra", "key"), MODES)
def test_codex_runs_a_command_and_finishes(
    agent: Agent, tmp_path: Path, namespace: Namespace, extra: list[str], key: str | None
) -> None:
    """`codex exec` runs cat with its exec_command tool on the model's word and ends on the model's answer."""
    note = tmp_path / "note.txt"
    note.write_text("The secret word is basil.\n")
    model = scripted_agent_model(tmp_path / "model", "exec_command", {"cmd": f"cat {note}"}, ANSWER)
    cli = inside(agent, namespace)
    port = serve(cli, model, extra, key, tmp_path)
    home = codex_home(tmp_path / "codex-home", port)
    env = clean_env(tmp_path, CODEX_HOME=str(home), LOCAL_API_KEY=key or "unused")
    done = namespace.run(
        codex_exec(f"Run cat {note} and tell me the word."),
        env,
        tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == ANSWER, done.stdout
    assert cli.run("serve", "stop", "--port", str(port)).rc == 0


def test_the_bodies_claude_code_sends_translate_as_documented(tmp_path: Path, namespace: Namespace) -> None:
    """Claude Code's own requests (full tool set, not --bare), captured live, translate with every field accepted."""
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    env = claude_env(home, port)
    sent = capture(
        namespace,
        port,
        [str(agent_binary("claude")), "-p", "Say hi.", "--output-format", "json", "--model", "claude-sonnet-4-5"],
        env,
        tmp_path,
    )
    messages = [r for r in sent if r["path"].startswith("/v1/messages")]
    assert messages, sent
    for record in messages:
        body = record["body"]
        translated = translate_messages(body)
        chat = translated.chat
        assert not any(
            m["content"].startswith("x-anthropic-billing-header") for m in chat["messages"] if m["role"] == "system"
        )
        assert {"context_management", "thinking", "metadata", "tools"} <= set(body)
        assert chat["reasoning_budget"] == body["thinking"]["budget_tokens"]
        assert translated.omit_thinking == (body["thinking"].get("display") == "omitted")
        offered = {t["function"]["name"] for t in chat.get("tools", [])}
        assert offered | set(translated.tools.dropped) == {t["name"] for t in body["tools"]}
        assert chat["max_tokens"] == body["max_tokens"]


def test_the_bodies_codex_sends_translate_as_documented(tmp_path: Path, namespace: Namespace) -> None:
    """Codex's own request, captured live, translates: namespaces flattened, hosted tools left out, effort kept."""
    port = free_port()
    home = codex_home(tmp_path / "codex-home", port, top='model_reasoning_effort = "high"\n')
    env = clean_env(tmp_path, CODEX_HOME=str(home), LOCAL_API_KEY="unused")
    sent = capture(
        namespace, port, [str(agent_binary("codex")), "exec", "--skip-git-repo-check", "Say hi."], env, tmp_path
    )
    [record] = [r for r in sent if r["path"] == "/v1/responses"][:1]
    body = record["body"]
    translated = translate_responses(body, default_model="gpt-5-codex")
    chat = translated.chat
    assert body["store"] is False and body["reasoning"].get("summary") is not None
    assert chat["reasoning_effort"] == "high"
    kinds = {t["type"] for t in body["tools"]}
    assert "namespace" in kinds and kinds & {"web_search"}
    offered = [t["function"]["name"] for t in chat["tools"]]
    assert any("__" in name for name in offered)  # a namespace's functions, flattened
    assert "web_search" in translated.tools.dropped
    assert [m["role"] for m in chat["messages"]][:1] == ["system"]  # developer instructions first
