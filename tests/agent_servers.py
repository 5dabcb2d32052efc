"""Served scripted models that the real-agent tests share: one `serve start` per model and options (no tests here).

An agent's turns are requests: a test that only runs an agent against a server reads from it, so the tests of one
model and one configuration share one server, started once in a loopback-only network namespace (the agents run
in it too) and stopped when the last of them is done (``agent_server``). What a test reads of it, it reads from
where the server stands when the test begins: ``AgentServer.mark`` counts the front's request lines so far, and
``AgentServer.lines`` returns those written since. A server of ``--jit`` is unloaded again before each test
(``AgentServer.fresh``), so that each test's agent waits out a cold load, as on a server of its own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.agents_support import (
    Namespace,
    cat_call,
    inside,
    loopback_namespace,
    module_agent,
    notes_to_read,
    read_call,
    request_lines,
    serve,
    sessions_model,
)
from tests.conftest import Agent, processes_mentioning


@dataclass
class AgentServer:
    """A served scripted model inside a loopback-only namespace, shared by the tests of one module."""

    cli: Agent
    namespace: Namespace
    port: int
    root: Path
    jit: bool
    worker_pid: int | None = None  # an eager server's worker, as the first test found it

    @property
    def pid(self) -> int:
        """Return the front's pid, from its receipt."""
        receipt = json.loads((self.cli.serve_dir / f"{self.port}.json").read_text())
        pid: int = receipt["pid"]
        return pid

    def status(self) -> dict[str, Any]:
        """Return this server's line of `serve status` (the only server of its home)."""
        shown = self.cli.run("serve", "status")
        assert shown.rc == 0, shown.stdout + shown.stderr
        [server] = shown.data["servers"]
        return dict(server)

    def fresh(self) -> int:
        """Make the server as a test of its own would find it; return how many request lines it has written so far.

        A ``--jit`` server is unloaded (its next request loads the model again); an eager one must still be loaded,
        by the worker the first test found (an earlier session that crashed it shows here, not in a later test).
        """
        if self.jit:
            unloaded = self.cli.run("serve", "unload", "--port", str(self.port), "--expected-pid", str(self.pid))
            assert unloaded.rc == 0, unloaded.stdout + unloaded.stderr
        state = self.status()
        assert (state["state"], state["model_state"]) == ("running", "unloaded" if self.jit else "loaded"), state
        if not self.jit:
            self.worker_pid = self.worker_pid or state["worker"]["pid"]
            assert state["worker"]["pid"] == self.worker_pid, state
        return self.mark()

    def mark(self) -> int:
        """Return how many request lines the front has written so far (a test reads the ones after)."""
        return len(request_lines(self.cli, self.port))

    def lines(self, seen: int) -> list[dict[str, Any]]:
        """Return the request lines written after the first ``seen``."""
        return request_lines(self.cli, self.port)[seen:]


@contextlib.contextmanager
def agent_server(root: Path, model: Path, extra: list[str], key: str | None) -> Iterator[AgentServer]:
    """Serve ``model`` (``serve`` in tests/agents_support.py, with ``extra`` options and ``key``) in a new namespace.

    The server's home is ``root``/home; the server is stopped when the block ends, and nothing it started may
    outlive the stop (as the ``agent`` fixture checks after each test).
    """
    with loopback_namespace() as namespace:
        cli = inside(module_agent(root), namespace)
        port = serve(cli, model, extra, key, root)
        try:
            yield AgentServer(cli, namespace, port, root, "--jit" in extra)
        finally:
            assert cli.run("serve", "stop", "--port", str(port)).rc == 0
            left = processes_mentioning(str(cli.home))  # what the server started there
            for process in left:
                with contextlib.suppress(psutil.Error):
                    process.kill()
            assert not left, f"still running after the stop: {[p.pid for p in left]}"


def assert_own_reuse(turns: list[dict[str, Any]]) -> None:
    """Check that a session on a shared server reused its own turns, not an earlier test's prompts.

    The first turn must be new to the server (fewer tokens found cached than it holds) and every later turn must
    find more cached than the first did: what the first turn found is the most any earlier prompt shares with the
    session (every later prompt starts with the first), so a later turn's excess is the session's own, as on a
    server with a cold cache. With ``assert_cache_reuse``, each turn then reused its own previous turn.
    """
    first, found = turns[0]["prompt_tokens"], turns[0]["cached_tokens"]
    assert found < first, f"the first turn was not new to the shared server: {found} of {first} tokens cached"
    later = [turn["cached_tokens"] for turn in turns[1:]]
    assert all(cached > found for cached in later), f"a turn reused no more than the first found ({found}): {later}"


# The key of the keyed server that reads two notes (``notes_server``): the files that share it send this one.
NOTES_KEY = "sk-local-notes-key"


@dataclass
class NotesServer:
    """A keyed ``--log-prompts`` server whose model reads two notes (Claude Code) or cats them (Codex)."""

    server: AgentServer
    work: Path
    notes: list[Path]


@contextlib.contextmanager
def notes_server(root: Path) -> Iterator[NotesServer]:
    """Serve, keyed with ``NOTES_KEY`` and with ``--log-prompts``, a model over the two notes in ``root``/work.

    Offered Read (Claude Code) it reads a.txt then b.txt; offered exec_command (Codex) it cats them; then it
    answers Basil (``sessions_model``).
    """
    work, notes = notes_to_read(root)
    scripts = {"Read": [read_call(n) for n in notes], "exec_command": [cat_call(n) for n in notes]}
    model = sessions_model(root / "model", scripts, "Basil")
    with agent_server(root, model, ["--log-prompts"], NOTES_KEY) as server:
        yield NotesServer(server, work, notes)
