"""`mlx-agent run claude|codex` and `mlx-agent wire env`: the real pinned agents reach a served model, no file edited.

Each test serves a scripted session model (tests/agents_support.py) with a key and ``--log-prompts`` inside a
network namespace with only loopback, gives the agent a temporary HOME holding realistic configs of its own
(comments, unrelated settings, another provider), and runs it through `mlx-agent run` with no setting of
ours in its environment: the agent must finish its tool turns on the model's answer (exit 0), the front's
request lines must show the prompt cache reused from turn 2 and no billing block in any prompt, every file
that was under HOME before must be byte-identical after, and no agent config file may appear (the agents'
own state, which they write as they run, may).

The tests that run an agent, or a stand-in for one, share one such server with tests/e2e/test_wire_agents.py
(``keyed_notes_server``, tests/agent_servers.py): its model reads the two notes when offered Read (Claude Code)
and cats them when offered exec_command (Codex), and each test reads the request lines written since it began.
The test of `wire env` that stops its server and asks again has a server of its own.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

import pytest

from mlx_agent.plan import agent_settings as settings
from mlx_agent.plan.agent_settings import ServedFacts
from tests.agent_servers import NOTES_KEY, NotesServer, assert_own_reuse
from tests.agents_support import (
    Namespace,
    agent_binary,
    assert_cache_reuse,
    capture,
    clean_env,
    cli_env,
    inside,
    mlx_agent,
    serve,
    session_model,
    session_turns,
    user_home,
)
from tests.conftest import Agent, free_port

pytestmark = pytest.mark.e2e

ANSWER = "Basil"
KEY = NOTES_KEY  # the shared server's (``keyed_notes_server``)


def tree(directory: Path) -> dict[str, str]:
    """Return every file under ``directory`` by its relative path, with its sha256."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


# The files through which an agent is configured (what `mlx-agent wire` edits): none may appear or change. The
# agents write much state of their own while they run (session records, sqlite stores, skills, backups of
# ~/.claude.json), which is theirs, not a setting of ours.
CONFIG_FILES = re.compile(
    r"^(\.claude/settings(\.local)?\.json|\.codex/([^/]+\.)?config\.toml|\.config/opencode/.*\.jsonc?)$"
)


def assert_unchanged(before: dict[str, str], after: dict[str, str]) -> None:
    """Check that every file there before is byte-identical, and that no agent config file appeared."""
    changed = sorted(p for p in before if after.get(p) != before[p])
    assert not changed, f"files under HOME changed: {changed}"
    configs = sorted(p for p in after.keys() - before.keys() if CONFIG_FILES.match(p))
    assert not configs, f"new agent config files under HOME: {configs}"


def test_run_claude_reads_files_and_changes_no_file(keyed_notes_server: NotesServer, tmp_path: Path) -> None:
    """`mlx-agent run claude -- -p ...` finishes two Read turns on a keyed server, cache reused, HOME untouched."""
    server, work, notes = keyed_notes_server.server, keyed_notes_server.work, keyed_notes_server.notes
    cli, namespace, port = server.cli, server.namespace, server.port
    seen = server.fresh()
    home = user_home(tmp_path / "user")
    before = tree(home)
    prompt = "Read a.txt and b.txt, then tell me the word."
    claude = ["--bare", "-p", prompt, "--output-format", "json", "--tools", "Read", "--allowedTools", "Read"]
    claude += ["--system-prompt", "You read files for the user."]
    argv = mlx_agent("run", "claude", "--port", str(port), "--agent-bin", str(agent_binary("claude")))
    done = namespace.run([*argv, "--", *claude], cli_env(cli, home), work, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, result
    assert result["num_turns"] == len(notes) + 1, result
    turns = session_turns(cli, port, prompt, len(notes) + 1, seen)
    assert {t["model"] for t in turns} == {"local-coder"}  # ANTHROPIC_MODEL: the served name, no --model
    assert_cache_reuse(turns)
    assert_own_reuse(turns)  # the shared server's cache held earlier tests' prompts
    assert_unchanged(before, tree(home))


def test_run_codex_runs_commands_and_changes_no_file(keyed_notes_server: NotesServer, tmp_path: Path) -> None:
    """`mlx-agent run codex -- exec ...` finishes two exec_command turns on a keyed server, HOME's config untouched."""
    server, work, notes = keyed_notes_server.server, keyed_notes_server.work, keyed_notes_server.notes
    cli, namespace, port = server.cli, server.namespace, server.port
    seen = server.fresh()
    home = user_home(tmp_path / "user")
    before = tree(home)
    prompt = "Cat a.txt and b.txt, then tell me the word."
    codex = ["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt]
    argv = mlx_agent("run", "codex", "--port", str(port), "--agent-bin", str(agent_binary("codex")))
    done = namespace.run([*argv, "--", *codex], cli_env(cli, home), work, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == ANSWER, done.stdout
    turns = session_turns(cli, port, prompt, len(notes) + 1, seen)
    assert {t["model"] for t in turns} == {"local-coder"}
    assert_cache_reuse(turns)
    assert_own_reuse(turns)
    assert_unchanged(before, tree(home))


def test_run_passes_the_agents_exit_status_through(keyed_notes_server: NotesServer, tmp_path: Path) -> None:
    """`mlx-agent run` exits with the agent's status; Codex gets the settings, the key in neither argv nor env."""
    server = keyed_notes_server.server
    cli, namespace, port = server.cli, server.namespace, server.port
    lines = server.fresh()
    home = user_home(tmp_path / "user")
    fake = tmp_path / "fake-agent"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$HOME/../argv"\nenv > "$HOME/../env"\nexit 7\n')
    fake.chmod(0o755)
    argv = mlx_agent("run", "codex", "--port", str(port), "--agent-bin", str(fake), "--", "exec", "hi")
    done = namespace.run(argv, cli_env(cli, home), tmp_path, timeout=120)
    assert done.returncode == 7, done.stdout + done.stderr
    seen = (tmp_path / "argv").read_text().splitlines()
    assert seen[-2:] == ["exec", "hi"] and f'model_providers.mlx_agent.base_url="http://127.0.0.1:{port}/v1"' in seen
    assert KEY not in " ".join(seen)  # never in argv: the provider's auth command reads it from the key file
    assert 'model_providers.mlx_agent.auth.command="grep"' in seen and str(server.root / "keys") in " ".join(seen)
    seen_env = (tmp_path / "env").read_text()
    assert KEY not in seen_env and "MLX_AGENT_API_KEY=" not in seen_env
    assert server.lines(lines) == []  # the stand-in sent nothing


def test_wire_env_sh_gives_plain_claude_what_it_needs(keyed_notes_server: NotesServer, tmp_path: Path) -> None:
    """`wire env --shell sh` output, sourced by sh, lets a plain `claude -p` finish Read turns; the key read live."""
    server, work = keyed_notes_server.server, keyed_notes_server.work
    cli, namespace, port = server.cli, server.namespace, server.port
    seen = server.fresh()
    printed = cli.run("wire", "env", "--port", str(port), "--agent", "claude", "--shell", "sh", check_json=False)
    assert printed.rc == 0, printed.stderr
    assert KEY not in printed.stdout and str(server.root / "keys") in printed.stdout  # a reference, not the key
    home = user_home(tmp_path / "user")
    settings = tmp_path / "claude.sh"
    settings.write_text(printed.stdout)
    claude = [str(agent_binary("claude")), "--bare", "-p", "Read the notes, then tell me the word.", "--tools", "Read"]
    claude += ["--allowedTools", "Read", "--output-format", "json", "--system-prompt", "You read files."]
    script = f". {shlex.quote(str(settings))} && exec {shlex.join(claude)}"
    done = namespace.run(["sh", "-c", script], clean_env(home), work, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, result
    assert all(line["status"] == 200 for line in server.lines(seen))  # the key it read live was accepted


def test_wire_env_json_and_fish(agent: Agent, tmp_path: Path, namespace: Namespace) -> None:
    """`wire env --json` gives the live server's names, window and key file; fish lines set the same variables."""
    model = session_model(tmp_path / "model", [], ANSWER, window=65536)
    cli = inside(agent, namespace)
    port = serve(cli, model, [], KEY, tmp_path)
    shown = cli.run("wire", "env", "--port", str(port), "--agent", "codex")
    assert shown.rc == 0, shown.stdout + shown.stderr
    data = shown.data
    assert data["env"] == {} and data["key"]["vars"] == []  # Codex reads the key file itself: no variable
    assert "-c" in data["args"] and "model_context_window=65536" in data["args"] and KEY not in shown.stdout
    reader = f'model_providers.mlx_agent.auth.args=["-m1", "-v", "-E", "^[[:space:]]*(#|$)", "{tmp_path}/keys"]'
    assert reader in data["args"]  # the command that reads the key file, not the key
    assert f'model_providers.mlx_agent.base_url="http://127.0.0.1:{port}/v1"' in data["args"]
    keyed = cli.run("wire", "env", "--port", str(port), "--show-key")
    assert keyed.data["env"]["OPENAI_API_KEY"] == KEY and keyed.data["env"]["OPENAI_BASE_URL"].endswith(f":{port}/v1")
    fish = cli.run("wire", "env", "--port", str(port), "--agent", "anthropic", "--shell", "fish", check_json=False)
    assert fish.stdout.splitlines()[0] == f"set -gx ANTHROPIC_BASE_URL http://127.0.0.1:{port}"
    unknown = cli.run("wire", "env", "--port", str(port), "--model", "nope")
    assert unknown.rc == 2 and unknown.code == "model_not_served"
    assert "local-coder" in unknown.doc["error"]["details"]["served"]
    assert cli.run("serve", "stop", "--port", str(port)).rc == 0
    gone = cli.run("wire", "env", "--port", str(port))
    assert gone.rc == 1 and gone.code == "no_server"


@pytest.mark.parametrize("pinned", [True, False], ids=["settings", "without"])
def test_claude_settings_stop_the_billing_block_at_the_source(
    tmp_path: Path, namespace: Namespace, pinned: bool
) -> None:
    """With ``claude_env``'s settings Claude Code sends no per-turn billing block at all; without them it does."""
    port = free_port()
    facts = ServedFacts(f"http://127.0.0.1:{port}", port, ("local-coder",), (), None, None, 131072, None)
    ours = settings.claude_env(facts, None)
    if not pinned:
        ours.pop(settings.CLAUDE_ATTRIBUTION)
    home = tmp_path / "home"
    home.mkdir()
    argv = [str(agent_binary("claude")), "-p", "Say hi.", "--output-format", "json"]
    sent = capture(namespace, port, argv, clean_env(home, **ours), tmp_path)
    bodies = [r["body"] for r in sent if r["path"].startswith("/v1/messages")]
    assert bodies, sent
    assert {b["model"] for b in bodies} <= {"local-coder"}
    billed = [
        block
        for body in bodies
        for block in (body.get("system") if isinstance(body.get("system"), list) else [])
        if str(block.get("text", "")).startswith("x-anthropic-billing-header")
    ]
    assert bool(billed) is not pinned, billed
