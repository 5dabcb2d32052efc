"""Claude Code and Codex CLI, unmodified, finish a tool round trip against `serve start`, eager and JIT, keyed or not.

Each runs inside a network namespace that has only loopback (tests/agents_support.py), against a scripted
tiny model that calls the agent's own file tool (Claude Code: Read; Codex: exec_command running cat) and,
given the tool's result, answers with a word it could only reach after a tool round. The agent exits 0 on that
answer only if every request it sent was accepted and every reply was well formed. Both agents' tests of one
mode share that mode's server (tests/agent_servers.py): the model picks each agent's call by the tools it is
offered, and a JIT server is unloaded before each test, so each agent waits out a cold load.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agent_servers import AgentServer, agent_server
from tests.agents_support import (
    Namespace,
    agent_binary,
    capture,
    claude_env,
    claude_reads,
    clean_env,
    codex_exec,
    codex_home,
    sessions_model,
)
from tests.conftest import free_port
from tests.gateway_support import translate_messages, translate_responses

pytestmark = pytest.mark.e2e

ANSWER = "Basil"
KEY = "sk-local-test-key"
# Each mode is one server, shared by the Claude Code test and the Codex test of that mode (their turns only read).
MODES = [
    pytest.param(([], None), id="eager"),
    pytest.param((["--jit"], None), id="jit"),
    pytest.param(([], KEY), id="eager-keyed"),
    pytest.param((["--jit"], KEY), id="jit-keyed"),
]


@dataclass
class Served:
    """One mode's server, the note both agents read and the key they send (None: no key)."""

    server: AgentServer
    note: Path
    key: str | None


@pytest.fixture(scope="module")
def note(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Write the note that both agents are scripted to read."""
    written = tmp_path_factory.mktemp("note") / "note.txt"
    written.write_text("The secret word is basil.\n")
    return written


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory, note: Path) -> Path:
    """Build the scripted model: Claude Code (offered Read) reads the note, Codex (exec_command) cats it."""
    scripts = {"Read": [("Read", {"file_path": str(note)})], "exec_command": [("exec_command", {"cmd": f"cat {note}"})]}
    return sessions_model(tmp_path_factory.mktemp("model") / "model", scripts, ANSWER)


@pytest.fixture(scope="module", params=MODES)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model: Path, note: Path
) -> Iterator[Served]:
    """Serve the scripted model in one mode for both agents' tests of that mode."""
    extra, key = request.param
    with agent_server(tmp_path_factory.mktemp("served"), model, extra, key) as server:
        yield Served(server, note, key)


def test_claude_code_reads_a_file_and_finishes(served: Served, tmp_path: Path) -> None:
    """`claude -p` calls its Read tool on the model's word, reads the file, and ends on the model's answer."""
    server, key = served.server, served.key
    seen = server.fresh()
    home = tmp_path / "claude-home"
    home.mkdir()
    done = server.namespace.run(claude_reads(served.note), claude_env(home, server.port, key), tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, result
    assert result["num_turns"] >= 2  # the answer comes only after the Read tool's result went back
    assert all(line["status"] == 200 for line in server.lines(seen))


def test_codex_runs_a_command_and_finishes(served: Served, tmp_path: Path) -> None:
    """`codex exec` runs cat with its exec_command tool on the model's word and ends on the model's answer."""
    server, key = served.server, served.key
    seen = server.fresh()
    home = codex_home(tmp_path / "codex-home", server.port)
    env = clean_env(tmp_path, CODEX_HOME=str(home), LOCAL_API_KEY=key or "unused")
    done = server.namespace.run(
        codex_exec(f"Run cat {served.note} and tell me the word."),
        env,
        tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == ANSWER, done.stdout
    assert all(line["status"] == 200 for line in server.lines(seen))


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
