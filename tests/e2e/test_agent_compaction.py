"""Codex CLI and Claude Code, unmodified, against what the front tells them about the context.

Codex compacts a session through the front's compaction and goes on to its answer:

Codex compacts remotely when its provider is named ``OpenAI``: by default (its ``remote_compaction_v2``
feature) with a ``compaction_trigger`` item in a ``/v1/responses`` request, otherwise with
``POST /v1/responses/compact``; it has no fallback, so a refused compaction ends the turn. Its
``model_auto_compact_token_limit`` is set below what Codex's own instructions and tools already take, so it
compacts before each request after the first. It runs inside a network namespace with only loopback
(tests/agents_support.py) against a scripted tiny model that runs ``cat`` on numbered files in turn, works out
which file is next from the files named anywhere in the conversation (a summary included), and answers the
front's summary request with a summary naming the last file read. The session can reach the last file, and
so the answer, only if each compaction was answered and its summary came back in the next request.

Claude Code, with its gateway model discovery on, lists the front's models for its model picker: it must find
the concrete names only (a glob alias is no model anyone can pick). And Claude Code's stream-json mode, which
asks for thinking display "updates", is answered without a refusal.

Both Codex compaction tests share one server (``compacting``, tests/agent_servers.py) over the numbered files,
and both Claude Code tests another (``reading``: a model that reads the note, served with the literal alias
``claude-local`` and ``--log-prompts``); each test reads the request lines written since it began.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.gateway.responses.compact import SUMMARY_REQUEST
from mlx_agent.gateway.responses.request import SUMMARY_LEAD
from tests.agent_servers import AgentServer, agent_server
from tests.agents_support import (
    agent_binary,
    cat_call,
    claude_env,
    clean_env,
    codex_exec,
    codex_home,
    compacting_model,
    numbered_file,
    scripted_agent_model,
)

pytestmark = pytest.mark.e2e

ANSWER = "Basil"
FILES = 3
WINDOW = 131072


def asks_for_summary(line: dict[str, Any]) -> bool:
    """Return whether a logged prompt is a compaction (its last message is the front's summary request)."""
    prompt = line.get("prompt") or [{}]
    return bool(prompt[-1].get("content") == SUMMARY_REQUEST)


def summaries_in(line: dict[str, Any]) -> list[str]:
    """Return the summaries a logged prompt carries back (user messages that open with ``SUMMARY_LEAD``)."""
    return [
        str(m["content"]).removeprefix(SUMMARY_LEAD)
        for m in line.get("prompt") or []
        if m.get("role") == "user" and str(m.get("content")).startswith(SUMMARY_LEAD)
    ]


@pytest.fixture(scope="module")
def compacting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    """Serve, with ``--log-prompts``, the compacting model that cats the numbered files in the server's ``work``."""
    root = tmp_path_factory.mktemp("compacting")
    work = root / "work"
    work.mkdir()
    for index in range(FILES):
        numbered_file(work, index).write_text(f"note {index}\n" * 20)
    model = compacting_model(root / "model", work, FILES, ANSWER, WINDOW, call=cat_call)
    with agent_server(root, model, ["--log-prompts"], None) as server:
        yield server


@pytest.mark.parametrize("v2", [True, False], ids=["compaction-trigger", "compact-endpoint"])
def test_codex_compacts_and_goes_on(compacting: AgentServer, tmp_path: Path, v2: bool) -> None:
    """`codex exec` compacts through the front before each turn and still cats every file and answers."""
    cli, namespace, port, work = compacting.cli, compacting.namespace, compacting.port, compacting.root / "work"
    seen = compacting.fresh()
    home = codex_home(
        tmp_path / "codex-home",
        port,
        top=f"model_auto_compact_token_limit = 1000\n\n[features]\nremote_compaction_v2 = {str(v2).lower()}\n",
        name="OpenAI",  # Codex compacts remotely only for a provider of that name
    )
    env = clean_env(tmp_path, CODEX_HOME=str(home), LOCAL_API_KEY="unused")
    done = namespace.run(
        codex_exec("Cat the numbered notes here one by one, then tell me the word."),
        env,
        work,
        timeout=600,
    )
    lines = compacting.lines(seen)
    shown = [(line["endpoint"], line["status"], asks_for_summary(line), len(summaries_in(line))) for line in lines]
    assert done.returncode == 0, f"{shown}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip().splitlines()[-1] == ANSWER, done.stdout
    assert all(line["status"] == 200 for line in lines), shown  # a hang-up after response.completed included
    compactions = [index for index, line in enumerate(lines) if asks_for_summary(line)]
    assert len(compactions) >= FILES - 1, shown  # one before each turn after the first
    made = {f"Summary: read the files up to {numbered_file(work, k)}." for k in range(FILES)}
    for index in compactions:  # the next request carries the model's summary back in place of the history
        carried = summaries_in(lines[index + 1])
        assert carried and set(carried) <= made, shown
    assert cli.run("serve", "status").data["servers"][0]["state"] == "running"  # still up for the next test


@pytest.fixture(scope="module")
def reading(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    """Serve, with the literal alias ``claude-local`` and ``--log-prompts``, a model that reads the note (Read)."""
    root = tmp_path_factory.mktemp("reading")
    note = root / "note.txt"
    note.write_text("The secret word is basil.\n")
    model = scripted_agent_model(root / "model", "Read", {"file_path": str(note)}, ANSWER)
    with agent_server(root, model, ["--alias", "claude-local", "--log-prompts"], None) as server:
        yield server


def test_claude_code_discovers_the_concrete_names(reading: AgentServer, tmp_path: Path) -> None:
    """With CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY, Claude Code caches the served literal alias, no glob.

    It keeps the ids that name Claude, with their display names only (2.1.332 reads no window there).
    """
    note = reading.root / "note.txt"
    cli, namespace, port = reading.cli, reading.namespace, reading.port
    seen = reading.fresh()
    home = tmp_path / "claude-home"
    home.mkdir()
    env = clean_env(  # nonessential traffic stays on: the discovery is part of it
        home,
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
        ANTHROPIC_API_KEY="unused",
        CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY="1",
        DISABLE_AUTOUPDATER="1",
    )
    # Not --bare: Claude Code's bare mode skips the discovery.
    argv = [str(agent_binary("claude")), "-p", f"Read {note} and tell me the word."]
    argv += ["--output-format", "json", "--model", "claude-local", "--tools", "Read", "--allowedTools", "Read"]
    done = namespace.run([*argv, "--system-prompt", "You read files for the user."], env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["result"] == ANSWER
    listings = [line for line in reading.lines(seen) if line["endpoint"] == "/v1/models"]
    assert listings and all(line["status"] == 200 for line in listings)
    cached = json.loads((home / ".claude" / "cache" / "gateway-models.json").read_text())
    assert [m["id"] for m in cached["models"]] == ["claude-local"]  # local-coder does not name Claude; no glob
    assert cli.run("serve", "status").data["servers"][0]["state"] == "running"  # still up for the next test


def test_claude_code_streaming_json_is_not_refused(reading: AgentServer, tmp_path: Path) -> None:
    """`claude -p --output-format stream-json` asks for thinking display "updates": every request is a 200.

    Refused, Claude Code would send the request again without the display; so the tool round trip must take
    exactly its two Messages requests (plus side requests that do not carry the user's prompt).
    """
    note = reading.root / "note.txt"
    namespace, port = reading.namespace, reading.port
    seen = reading.fresh()
    home = tmp_path / "claude-home"
    home.mkdir()
    env = claude_env(home, port)
    prompt = f"Read {note} and tell me the word."
    argv = [str(agent_binary("claude")), "--bare", "-p", prompt, "--output-format", "stream-json", "--verbose"]
    argv += ["--model", "claude-sonnet-4-5", "--tools", "Read", "--allowedTools", "Read"]
    done = namespace.run([*argv, "--system-prompt", "You read files for the user."], env, tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [result] = [json.loads(line) for line in done.stdout.splitlines() if '"type":"result"' in line.replace(" ", "")]
    assert result["is_error"] is False and result["result"] == ANSWER, result
    lines = [line for line in reading.lines(seen) if line["endpoint"] == "/v1/messages"]
    turns = [line for line in lines if any(prompt in str(m.get("content")) for m in line.get("prompt") or [])]
    assert all(line["status"] == 200 for line in lines) and len(turns) == 2, [(t["status"], t["stream"]) for t in lines]
