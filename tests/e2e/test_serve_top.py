"""``serve top`` in a real terminal against two real servers: what it shows appears and changes, ``q`` leaves.

Two servers on the tiny model (``alpha`` eager, ``beta`` JIT) are started by the CLI; ``serve top`` runs in its
own tmux server (200x50, wide enough for every column) and the test reads the screen with ``capture-pane``
while the OpenAI SDK sends requests. ``--json`` is the same data as lines, parsed here. The tests that only watch
the two servers share one pair (counting alpha's requests from where it stands); the one that loads and unloads
beta starts its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.agents_support import Namespace, Tmux
from tests.conftest import LAUNCHER, Agent, free_port, processes_mentioning

HI: Any = [{"role": "user", "content": "hello there, how are you"}]


class Host(Namespace):
    """The machine's own network: tmux runs here, as a person runs ``serve top``."""

    @property
    def prefix(self) -> tuple[str, ...]:
        """Return no prefix: programs run as they are."""
        return ()


def row(screen: str, name: str) -> list[str]:
    """Return the cells of the screen's row for model ``name`` (columns are separated by spaces)."""
    line = next((x for x in screen.splitlines() if f" {name} " in f" {x} "), "")
    return line.split()


def cell(screen: str, name: str, column: str) -> str:
    """Return one column of a model's row, found by the header's column order (ports and modes first)."""
    header = next(x for x in screen.splitlines() if "PORT" in x and "STATE" in x).split()
    cells = row(screen, name)
    if not cells:
        return ""
    if not cells[0].isdigit():  # a second model of a server leaves its port and mode blank
        cells = ["", "", *cells]
    return cells[header.index(column)] if header.index(column) < len(cells) else ""


def start_both(agent: Agent, tiny_model: Path) -> tuple[int, int, int]:
    """Start ``alpha`` (eager) and ``beta`` (JIT) on the tiny model: their ports and beta's front pid."""
    alpha, beta = free_port(), free_port()
    agent.launch("--path", str(tiny_model), "--port", str(alpha), "--served-model-name", "alpha")
    receipt = agent.launch("--path", str(tiny_model), "--port", str(beta), "--served-model-name", "beta", "--jit")
    return alpha, beta, receipt["pid"]


@pytest.fixture
def servers(agent: Agent, tiny_model: Path) -> tuple[int, int, int]:
    """Start both servers for one test that changes them (it loads and unloads beta); the agent fixture stops both."""
    return start_both(agent, tiny_model)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[tuple[Agent, int, int]]:
    """Start both servers once, in a home of their own, for the tests that only watch them; stop both afterwards."""
    directory = tmp_path_factory.mktemp("top")
    home = directory / "home"
    home.mkdir()
    agent = Agent(home, {**os.environ, "MLX_AGENT_HOME": str(home), "HF_HOME": str(directory / "hf")})
    alpha, beta, _ = start_both(agent, tiny_model)
    try:
        yield agent, alpha, beta
    finally:
        stops = [agent.run("serve", "stop", "--port", str(port)) for port in (alpha, beta)]
        assert [stop.rc for stop in stops] == [0, 0], [stop.stdout + stop.stderr for stop in stops]
        assert processes_mentioning(str(home)) == []


def test_top_shows_servers_and_follows_them(agent: Agent, servers: tuple[int, int, int], tmp_path: Path) -> None:
    """Both models appear with their states; requests change the counters and load beta; ``q`` exits 0."""
    alpha, beta, beta_pid = servers
    term = Tmux(Host("host"), tmp_path / "tmux.sock", {**agent.env, "TERM": "xterm-256color", "LANG": "C.UTF-8"})
    term.start([sys.executable, str(LAUNCHER), "serve", "top"], agent.home)
    try:
        screen = term.wait_for(lambda s: "alpha" in s and "beta" in s, "both models")
        assert str(alpha) in screen and str(beta) in screen
        assert cell(screen, "alpha", "STATE") == "loaded" and cell(screen, "beta", "STATE") == "unloaded"
        assert cell(screen, "beta", "LOADS") == "0"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{alpha}/v1", api_key="unused")
        for _ in range(3):
            for _chunk in client.chat.completions.create(model="alpha", messages=HI, max_tokens=8, stream=True):
                pass
        screen = term.wait_for(lambda s: cell(s, "alpha", "TOK/S") not in ("", "0.0"), "alpha's tokens/s")
        assert cell(screen, "alpha", "TTFT").endswith("ms")  # streams that ended in the last minute
        assert cell(screen, "alpha", "CACHE").endswith("%")
        openai.OpenAI(base_url=f"http://127.0.0.1:{beta}/v1", api_key="unused").chat.completions.create(
            model="beta", messages=HI, max_tokens=2
        )
        screen = term.wait_for(lambda s: cell(s, "beta", "STATE") == "loaded", "beta loaded")
        assert cell(screen, "beta", "LOADS") == "1"
        assert cell(screen, "beta", "MEM/EST").split("/")[0] != "-"  # a worker now: its resident memory
        assert agent.run("serve", "unload", "--port", str(beta), "--expected-pid", str(beta_pid)).rc == 0
        term.wait_for(lambda s: cell(s, "beta", "STATE") == "unloaded", "beta unloaded again")
        term.keys("q")
        assert term.exit_status() == 0
    finally:
        term.kill()


def test_top_json_lines_parse(watched: tuple[Agent, int, int]) -> None:
    """``--json --iterations 2`` writes two JSON lines naming both servers, their models and their windows."""
    agent, alpha, beta = watched
    before = agent.run("serve", "status", "--port", str(alpha)).data["servers"][0]["models"][0]["window"]["requests"]
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{alpha}/v1", api_key="unused")
    client.chat.completions.create(model="alpha", messages=HI, max_tokens=4)
    argv = [sys.executable, str(LAUNCHER), "serve", "top", "--json", "--iterations", "2", "--interval", "0.2"]
    done = subprocess.run(argv, env=agent.env, capture_output=True, text=True, timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        snapshot = json.loads(line)
        ports = {s["port"]: s for s in snapshot["servers"]}
        assert set(ports) == {alpha, beta}
        assert ports[beta]["mode"] == "jit" and ports[beta]["models"][0]["model_state"] == "unloaded"
        model = ports[alpha]["models"][0]
        assert model["name"] == "alpha" and model["model_state"] == "loaded"
        assert model["requests"] == before + 1 and model["tokens_per_second"] > 0 and model["worker_rss_bytes"] > 0
        assert snapshot["machine_memory"]["total_bytes"] > 0
    status = agent.run("serve", "status", "--port", str(alpha)).data["servers"][0]["models"][0]
    assert status["window"]["requests"] == before + 1
    assert status["worker_rss_bytes"] > 0 and status["load_progress"] is None


def test_top_leaves_on_ctrl_c(watched: tuple[Agent, int, int], tmp_path: Path) -> None:
    """Ctrl-C leaves the view with exit status 0, as ``q`` does."""
    agent = watched[0]
    term = Tmux(Host("host"), tmp_path / "tmux.sock", {**agent.env, "TERM": "xterm-256color", "LANG": "C.UTF-8"})
    term.start([sys.executable, str(LAUNCHER), "serve", "top"], agent.home)
    try:
        term.wait_for(lambda s: "alpha" in s and "beta" in s, "both models")
        term.keys("C-c")
        assert term.exit_status() == 0
    finally:
        term.kill()
