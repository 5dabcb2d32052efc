"""Claude Code and Codex CLI, unmodified, through sessions of ten tool turns against `serve start`.

Each agent runs inside a network namespace with only loopback (tests/agents_support.py) against a scripted
tiny model (``session_model``) that calls the agent's own tools in turn (read a file, edit it, run a command)
and answers with a word only after the tenth tool result. The front's request lines (``--log-prompts``) give
each turn's prompt and cached tokens: from the second turn on, the worker must reuse at least 95% of the
previous turn's prompt, every request must be answered (200), and the agent must end the session with exit
status 0. The tools' effects on disk are checked too, so a turn that "succeeded" without running its tool
fails. Last, a Claude Code session longer than the model's context window compacts and still ends on its answer.

The sessions over the whole window share one server (``sessions``, tests/agent_servers.py): its model holds each
agent's script and picks it by the tools the agent offers, the Claude Code sessions work in one folder, written
afresh before each, and each test reads the request lines written since it began. The compacting session has a
model and window of its own, so it has a server of its own.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agent_servers import AgentServer, agent_server, assert_own_reuse
from tests.agents_support import (
    Namespace,
    Tmux,
    agent_binary,
    assert_cache_reuse,
    claude_env,
    clean_env,
    codex_exec,
    codex_home,
    compacting_model,
    inside,
    numbered_file,
    prompt_turns,
    request_lines,
    serve,
    sessions_model,
    submit,
    tool_results,
    trusting_config,
    wait_for_lines,
)
from tests.conftest import Agent

pytestmark = pytest.mark.e2e

ANSWER = "Basil"
TOOL_TURNS = 10
CLAUDE_PROMPT = "Tidy the three notes in this folder, then tell me the word."
CODEX_PROMPT = "Patch the three notes here, count the changes, then tell me the word."
NOTES = {"a": ("alpha", "alpha one\n"), "b": ("beta", "beta two\n"), "c": ("gamma", "gamma three\n")}
LINES = 40  # each note's lines: long enough that each result makes the prompt grow


def notes(work: Path) -> dict[str, Path]:
    """Write the three notes a session works on, in ``work`` made afresh; return them by name."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    made = {}
    for name, (_, line) in NOTES.items():
        made[name] = work / f"{name}.txt"
        made[name].write_text(line * LINES)
    return made


def claude_calls(work: Path, files: dict[str, Path]) -> list[tuple[str, dict[str, Any]]]:
    """Return ten Claude Code tool calls: Read, Edit and Bash in turn, each needing the ones before it."""
    log = work / "log.txt"
    calls: list[tuple[str, dict[str, Any]]] = []
    for name, (old, _) in NOTES.items():
        path = str(files[name])
        calls.append(("Read", {"file_path": path}))
        calls.append(("Edit", {"file_path": path, "old_string": old, "new_string": old.upper(), "replace_all": True}))
        calls.append(("Bash", {"command": f"grep -c {old.upper()} {path} >> {log}", "description": "Count edits"}))
    calls.append(("Read", {"file_path": str(log)}))
    assert len(calls) == TOOL_TURNS
    return calls


def assert_claude_tools_ran(work: Path, files: dict[str, Path]) -> None:
    """Check what the session's tools did on disk: every note edited, every count logged."""
    for name, (old, line) in NOTES.items():
        assert files[name].read_text() == line.replace(old, old.upper()) * LINES
    assert (work / "log.txt").read_text() == f"{LINES}\n" * len(NOTES)


def claude_argv(prompt: str, bare: bool, *mode: str) -> list[str]:
    """Return the command line of a Claude Code session that may use Read, Edit and Bash.

    ``bare`` is Claude Code's minimal mode with a one-line system prompt; otherwise it sends its own full
    system prompt (tens of thousands of the tiny tokenizer's tokens: the first turn's prefill takes minutes).
    """
    minimal = ["--bare", "--system-prompt", "You tidy notes for the user."] if bare else []
    tools = ["--tools", "Read,Edit,Bash", "--allowedTools", "Read,Edit,Bash"]
    return [str(agent_binary("claude")), *minimal, "-p", prompt, *mode, "--model", "claude-sonnet-4-5", *tools]


def session_turns(server: AgentServer, seen: int, marker: str, count: int) -> list[dict[str, Any]]:
    """Return the session's turns: the request lines after the first ``seen`` whose prompt holds ``marker``, in order.

    Side requests (a title, a count of tokens) do not carry the user's prompt as a user message. Every
    request line must be a 200: Claude Code, refused, sends the request again without what was refused.
    """

    def enough(lines: list[dict[str, Any]]) -> bool:
        return len(prompt_turns(lines[seen:], marker)) >= count

    lines = wait_for_lines(server.cli, server.port, enough)[seen:]
    found = prompt_turns(lines, marker)
    assert [tool_results(t) for t in found] == list(range(count)), summary(lines)
    # Every request is answered: a refused one that the agent retried in another form still fails the session.
    assert all(line["status"] == 200 for line in lines), summary(lines)
    assert_own_reuse(found)  # the shared server's cache held earlier tests' prompts
    return found


def summary(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Return what a failed check shows of each request line: endpoint, status, tokens and message roles."""
    return [
        (line["endpoint"], line["status"], line["prompt_tokens"], line["cached_tokens"], roles(line)) for line in lines
    ]


def roles(line: dict[str, Any]) -> str:
    """Return a logged prompt's message roles, one letter each (s, u, a, t)."""
    return "".join(str(m.get("role", "?"))[:1] for m in line.get("prompt") or [])


def report(name: str, turns: list[dict[str, Any]]) -> None:
    """Check the cache reuse; print each turn's prompt and cached tokens, and turn 1's prefill time (``-s``)."""
    figures = assert_cache_reuse(turns)
    shown = ", ".join(f"turn {n}: {p}/{c}" for n, (p, c) in enumerate(figures, start=1))
    print(f"\n{name}: {shown}; turn 1 answered its first token in {turns[0]['ttft_ms']} ms")


@dataclass
class Sessions:
    """The server the ten-turn sessions share, and the folder the Claude Code sessions work in."""

    server: AgentServer
    work: Path

    def claude_notes(self) -> dict[str, Path]:
        """Write the Claude Code sessions' notes afresh (their calls name these paths); return them by name."""
        return notes(self.work)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sessions]:
    """Serve one model with ``--log-prompts`` for every ten-turn session: Claude Code's script and Codex's two.

    The model takes Claude Code's script when offered Read, Codex's apply_patch script when offered apply_patch
    (a catalogued model), and its sed script when offered exec_command alone (``sessions_model``).
    """
    root = tmp_path_factory.mktemp("sessions")
    work = root / "work"
    files = notes(work)
    scripts = {
        "Read": claude_calls(work, files),
        "apply_patch": codex_calls(files, True),
        "exec_command": codex_calls(files, False),
    }
    model = sessions_model(root / "model", scripts, ANSWER)
    with agent_server(root, model, ["--log-prompts"], None) as server:
        yield Sessions(server, work)


@pytest.mark.parametrize("bare", [pytest.param(True, id="bare"), pytest.param(False, id="full")])
def test_claude_code_print_json_session(sessions: Sessions, tmp_path: Path, bare: bool) -> None:
    """`claude -p --output-format json` reads, edits and runs commands for ten turns, reusing each prompt."""
    server, work = sessions.server, sessions.work
    files = sessions.claude_notes()
    seen = server.fresh()
    env = claude_env(tmp_path / "claude-home", server.port)
    done = server.namespace.run(claude_argv(CLAUDE_PROMPT, bare, "--output-format", "json"), env, work, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, result
    assert result["num_turns"] == TOOL_TURNS + 1, result
    assert_claude_tools_ran(work, files)
    turns = session_turns(server, seen, CLAUDE_PROMPT, TOOL_TURNS + 1)
    report(f"claude -p json ({'bare' if bare else 'full'})", turns)


def codex_calls(files: dict[str, Path], patch: bool) -> list[tuple[str, dict[str, Any]]]:
    """Return ten Codex tool calls: exec_command, and apply_patch for the edits if ``patch`` (else sed).

    apply_patch is a freeform tool: the front offers it as a function of one ``input`` string, the patch.
    """
    calls: list[tuple[str, dict[str, Any]]] = []
    for name, (old, line) in NOTES.items():
        path, new = files[name].name, line.replace(old, old.upper())
        calls.append(("exec_command", {"cmd": f"cat {path}"}))
        if patch:
            hunk = f"*** Begin Patch\n*** Update File: {path}\n@@\n-{line}+{new}*** End Patch\n"
            calls.append(("apply_patch", {"input": hunk}))
        else:
            calls.append(("exec_command", {"cmd": f"sed -i '1s/{old}/{old.upper()}/' {path}"}))
        calls.append(("exec_command", {"cmd": f"grep -c {old.upper()} {path} >> log.txt"}))
    calls.append(("exec_command", {"cmd": "cat log.txt"}))
    assert len(calls) == TOOL_TURNS
    return calls


# A model Codex's catalog does not know gets exec_command alone; one it knows (gpt-5.5) also gets apply_patch
# (and the tool_search tool).
CODEX_MODELS = [pytest.param("gpt-5-codex", False, id="uncatalogued"), pytest.param("gpt-5.5", True, id="catalogued")]


@pytest.mark.parametrize(("codex_model", "patch"), CODEX_MODELS)
def test_codex_exec_session(sessions: Sessions, tmp_path: Path, codex_model: str, patch: bool) -> None:
    """`codex exec` runs commands and edits files for ten turns, reusing each prompt, and ends on the answer."""
    server = sessions.server
    work = tmp_path / "work"
    files = notes(work)  # the calls name the notes by their names: Codex runs them in its working folder
    seen = server.fresh()
    home = codex_home(tmp_path / "codex-home", server.port, model=codex_model)
    env = clean_env(tmp_path, CODEX_HOME=str(home), LOCAL_API_KEY="unused")
    argv = codex_exec(CODEX_PROMPT)
    done = server.namespace.run(argv, env, work, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == ANSWER, done.stdout
    for name, (old, line) in NOTES.items():
        assert files[name].read_text() == line.replace(old, old.upper()) + line * (LINES - 1)
    assert (work / "log.txt").read_text() == "1\n" * len(NOTES)
    turns = session_turns(server, seen, CODEX_PROMPT, TOOL_TURNS + 1)
    report(f"codex exec ({codex_model})", turns)


def test_claude_code_stream_json_session(sessions: Sessions, tmp_path: Path) -> None:
    """`claude -p --output-format stream-json` goes through the same ten turns and ends on a success result."""
    server, work = sessions.server, sessions.work
    files = sessions.claude_notes()
    seen = server.fresh()
    env = claude_env(tmp_path / "claude-home", server.port)
    argv = claude_argv(CLAUDE_PROMPT, True, "--output-format", "stream-json", "--verbose")
    done = server.namespace.run(argv, env, work, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    result = events[-1]
    assert result["type"] == "result" and result["subtype"] == "success", result
    assert result["is_error"] is False and result["result"] == ANSWER, result
    assert result["num_turns"] == TOOL_TURNS + 1, result
    assistant = [block for e in events if e["type"] == "assistant" for block in e["message"]["content"]]
    uses = [block["name"] for block in assistant if block["type"] == "tool_use"]
    assert uses == [name for name, _ in claude_calls(work, files)], assistant
    assert_claude_tools_ran(work, files)
    turns = session_turns(server, seen, CLAUDE_PROMPT, TOOL_TURNS + 1)
    report("claude -p stream-json", turns)


def test_claude_code_interactive_session(sessions: Sessions, tmp_path: Path) -> None:
    """Claude Code's own UI, typed into in tmux, goes through the ten turns, shows the answer and exits 0 on /exit."""
    server, work = sessions.server, sessions.work
    files = sessions.claude_notes()
    seen = server.fresh()
    env = claude_env(tmp_path / "claude-home", server.port, TERM="xterm-256color")
    trusting_config(tmp_path / "claude-home", work, env["ANTHROPIC_API_KEY"])
    ui = Tmux(server.namespace, tmp_path / "tmux.sock", env)
    argv = claude_argv(CLAUDE_PROMPT, True)
    argv.remove("-p")
    argv.remove(CLAUDE_PROMPT)
    try:
        ui.start(argv, work)
        ui.wait_for(lambda screen: "? for shortcuts" in screen, "the prompt box")
        submit(ui, CLAUDE_PROMPT, lambda: server.mark() > seen)
        ui.wait_for(lambda screen: f"● {ANSWER}" in screen, "the answer", timeout=600)
        submit(ui, "/exit", lambda: "Resume this session" in ui.screen())
        assert ui.exit_status(timeout=180) == 0, ui.screen()
    finally:
        ui.kill()
    assert_claude_tools_ran(work, files)
    turns = session_turns(server, seen, CLAUDE_PROMPT, TOOL_TURNS + 1)
    report("claude interactive", turns)


COMPACT_FILES = 12  # Reads in the compacting session; together they hold more than the window
COMPACT_WINDOW = 12000  # the model's context window (tiny tokenizer's tokens); the compaction prompt alone is ~3700
COMPACT_PROMPT = "Read the numbered files one by one, then tell me the word."


def is_summary_request(line: dict[str, Any]) -> bool:
    """Say whether a logged prompt is Claude Code's compaction request (its last message asks for a summary)."""
    prompt = line.get("prompt") or [{}]
    return prompt[-1].get("role") == "user" and "<summary>" in str(prompt[-1].get("content"))


def test_claude_code_compacts_a_long_session(agent: Agent, tmp_path: Path, namespace: Namespace) -> None:
    """A session longer than the model's window ends on its answer: refused as too long, Claude Code compacts it.

    The turn past the window is refused (context_length_exceeded, which Claude Code reads as "prompt is too
    long"); Claude Code then sends its summarising request, cut at the head until it fits, and goes on from the
    summary. The scripted model knows where it was from the files the conversation names.
    """
    files = tmp_path / "files"
    files.mkdir()
    for k in range(COMPACT_FILES):
        numbered_file(files, k).write_text("".join(f"file {k}, line {n}: nothing to see\n" for n in range(60)))
    model = compacting_model(tmp_path / "model", files, COMPACT_FILES, ANSWER, COMPACT_WINDOW)
    cli = inside(agent, namespace)
    port = serve(cli, model, ["--log-prompts"], None, tmp_path)
    env = claude_env(tmp_path / "claude-home", port)
    argv = claude_argv(COMPACT_PROMPT, True, "--output-format", "json")
    argv[argv.index("Read,Edit,Bash")] = "Read"
    argv[argv.index("Read,Edit,Bash")] = "Read"
    done = namespace.run(argv, env, tmp_path, timeout=600)
    lines = request_lines(cli, port)
    shown = "\n".join(map(str, summary(lines)))
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{shown}"
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, result
    summaries = [line for line in lines if is_summary_request(line) and line["status"] == 200]
    assert summaries, shown  # it compacted: a summarising request was answered
    assert max(line["prompt_tokens"] or 0 for line in lines) <= COMPACT_WINDOW, shown
    print(f"\ncompacting session:\n{shown}")
    assert cli.run("serve", "stop", "--port", str(port)).rc == 0
