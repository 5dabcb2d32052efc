"""The question a person is asked after a preview on a real terminal (tmux): yes launches, anything else does not.

Each command runs in its own tmux server as a person runs it; the test reads the screen and types the answer.
A yes confirms the plan shown through ``--confirm --preview-hash``'s own path, so a plan that changed while the
question waited is refused ``preview_stale``. Off a terminal (pipes) and under ``--json`` nothing is asked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents_support import Namespace, Tmux
from tests.conditions import wait_until
from tests.conftest import LAUNCHER, Agent, free_port
from tests.fixtures.tiny_dataset import write_dataset
from tests.lora_support import train_args

QUESTION = "Launch this plan? [y/N]"


class Host(Namespace):
    """The machine's own network: tmux runs here, as a person's terminal does."""

    @property
    def prefix(self) -> tuple[str, ...]:
        """Return no prefix: programs run as they are."""
        return ()


@pytest.fixture
def term(agent: Agent, tmp_path: Path) -> Iterator[Tmux]:
    """Return a tmux server of the test's own, with the CLI's environment; kill it afterwards."""
    terminal = Tmux(Host("host"), tmp_path / "tmux.sock", {**agent.env, "TERM": "xterm-256color", "LANG": "C.UTF-8"})
    yield terminal
    terminal.kill()


def start(agent: Agent, term: Tmux, *args: str) -> str:
    """Run ``mlx-agent ARGS`` on the terminal and return the screen once the question is on it."""
    term.start([sys.executable, str(LAUNCHER), *args], agent.home)
    return term.wait_for(lambda s: QUESTION in s or "error" in s, "the question")


def test_yes_launches_the_plan_shown(agent: Agent, term: Tmux, tiny_model: Path) -> None:
    """The preview and its hash are shown, the question asked once; y launches that plan and exits 0."""
    port = free_port()
    screen = start(agent, term, "serve", "start", "--path", str(tiny_model), "--port", str(port))
    preview_hash = agent.preview_hash("--path", str(tiny_model), "--port", str(port))
    assert preview_hash in screen.replace("\n", "") and screen.count(QUESTION) == 1
    term.keys("y", "Enter")
    assert term.exit_status() == 0, term.screen()
    [server] = agent.run("serve", "status").data["servers"]
    assert (server["port"], server["state"]) == (port, "running")
    receipt = json.loads((agent.serve_dir / f"{port}.json").read_text())
    assert receipt["preview_hash"] == preview_hash


@pytest.mark.parametrize("answer", ["n", ""])
def test_any_other_answer_launches_nothing(agent: Agent, term: Tmux, tiny_model: Path, answer: str) -> None:
    """No, or Enter alone, launches nothing, says so in one line and exits 1."""
    port = free_port()
    start(agent, term, "serve", "start", "--path", str(tiny_model), "--port", str(port))
    if answer:
        term.keys(answer, literal=True)
    term.keys("Enter")
    assert term.exit_status() == 1
    assert "not confirmed: nothing was done" in term.screen()
    assert agent.run("serve", "status").data["servers"] == []


def test_a_plan_changed_before_the_answer_is_refused_stale(agent: Agent, term: Tmux, model_copy: Path) -> None:
    """A model file changed while the question waited makes the yes a stale confirm: preview_stale, no launch."""
    port = free_port()
    start(agent, term, "serve", "start", "--path", str(model_copy), "--port", str(port))
    config = json.loads((model_copy / "config.json").read_text())
    (model_copy / "config.json").write_text(json.dumps({**config, "changed_after_review": True}))
    term.keys("y", "Enter")
    assert term.exit_status() == 1
    assert "preview_stale" in term.screen()
    assert agent.run("serve", "status").data["servers"] == []


def test_json_on_a_terminal_asks_nothing(agent: Agent, term: Tmux, tiny_model: Path) -> None:
    """--json on a terminal prints the preview's envelope and exits 0 without asking or launching."""
    # The terminal stays open after the CLI (cat holds it) until tmux has read the line after the envelope: a
    # terminal whose programs have all exited loses what tmux had not read yet, and this envelope is long.
    held = r'"$@"; printf "\n[exited %s]\n" "$?"; exec cat'
    cli = [sys.executable, str(LAUNCHER), "serve", "start", "--path", str(tiny_model), "--json"]
    term.start(["sh", "-c", held, "sh", *cli], agent.home)

    def exited() -> str:
        shown = term.scrollback()
        return shown if "[exited " in shown else ""

    shown = wait_until(exited, "the CLI's exit on the terminal")
    assert "[exited 0]" in shown, shown
    assert QUESTION not in shown and '"requires_confirmation": true' in shown
    assert agent.run("serve", "status").data["servers"] == []


def test_a_piped_stdout_on_a_terminal_asks_nothing(agent: Agent, term: Tmux, tiny_model: Path) -> None:
    """With stdin a terminal but stdout a pipe (``| cat``) the preview is printed and it exits without waiting."""
    command = f"{sys.executable} {LAUNCHER} serve start --path {tiny_model} | cat"
    term.start(["sh", "-c", command], agent.home)
    assert term.exit_status() == 0, term.screen()
    screen = term.screen()
    assert "this plan?" not in screen and "--confirm --preview-hash" in screen.replace("\n", " ")
    assert agent.run("serve", "status").data["servers"] == []


def test_off_a_terminal_the_preview_is_the_first_of_two_steps(agent: Agent, tiny_model: Path) -> None:
    """Piped, the human preview is printed as before (no question, stdin unread) and nothing is launched."""
    port = str(free_port())
    argv = [sys.executable, str(LAUNCHER), "serve", "start", "--path", str(tiny_model), "--port", port]
    piped = subprocess.run(argv, input="y\n", capture_output=True, text=True, env=agent.env, timeout=120)
    assert piped.returncode == 0 and "this plan?" not in piped.stdout + piped.stderr
    assert "--confirm --preview-hash" in piped.stdout.replace("\n", " ")
    assert agent.run("serve", "status").data["servers"] == []


def terminal(env: dict[str, str], socket: Path) -> Tmux:
    """Return a tmux server of its own on ``socket`` with ``env`` (one per command: each leaves its last screen)."""
    return Tmux(Host("host"), socket, {**env, "TERM": "xterm-256color", "LANG": "C.UTF-8"})


def answer(term: Tmux, argv: list[str], cwd: Path, question: str, typed: str) -> tuple[int, str]:
    """Run ``mlx-agent ARGV`` on ``term``, answer ``question`` with ``typed``; return the exit status and screen."""
    term.start([sys.executable, str(LAUNCHER), *argv], cwd)
    try:
        term.wait_for(lambda s: question in s or "error" in s, question)
        term.keys(typed, literal=True)
        term.keys("Enter")
        return term.exit_status(), term.screen()
    finally:
        term.kill()


def test_wire_and_unwire_ask_and_apply_only_on_yes(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """The wire and unwire commands ask "Apply this plan?": a no leaves the file as it was, a yes edits it."""
    port = free_port()
    agent.launch("--path", str(tiny_model), "--port", str(port))
    home = tmp_path / "claude-home"
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"env": {"EDITOR": "vim"}}\n')
    original = settings.read_bytes()
    env = {**agent.env, "HOME": str(home)}
    wire = ["wire", "claude", "--port", str(port)]
    question = "Apply this plan? [y/N]"
    assert answer(terminal(env, tmp_path / "t1.sock"), wire, agent.home, question, "n")[0] == 1
    assert settings.read_bytes() == original
    status, screen = answer(terminal(env, tmp_path / "t2.sock"), wire, agent.home, question, "y")
    assert status == 0, screen
    assert json.loads(settings.read_text())["env"]["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{port}"
    wired = settings.read_bytes()
    unwire = ["unwire", "claude"]
    assert answer(terminal(env, tmp_path / "t3.sock"), unwire, agent.home, question, "no")[0] == 1
    assert settings.read_bytes() == wired
    status, screen = answer(terminal(env, tmp_path / "t4.sock"), unwire, agent.home, question, "yes")
    assert status == 0, screen
    assert settings.read_bytes() == original


def test_lora_train_asks_and_a_no_starts_nothing(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """The lora train command asks "Start this plan?"; a no starts no training and writes no adapter or receipt."""
    data = write_dataset(tmp_path / "data")
    argv = train_args(tiny_model, data, tmp_path / "adapter")
    status, screen = answer(terminal(agent.env, tmp_path / "t.sock"), argv, agent.home, "Start this plan? [y/N]", "n")
    assert status == 1 and "not confirmed: nothing was done" in screen
    assert not (tmp_path / "adapter").exists()
    assert not list((agent.home / "receipts" / "train").glob("*.json"))


def test_pull_asks_and_fetches_only_on_yes(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """The pull command asks "Fetch this plan?": a no fetches nothing, a yes fetches the plan shown into the cache."""
    from tests.hub_standin import Hub, model_files, serve

    hub = Hub()
    with serve(hub):
        commit = hub.publish("org/tiny", model_files(tiny_model))
        env = {k: v for k, v in agent.env.items() if k != "HF_HUB_OFFLINE"} | {"HF_ENDPOINT": hub.url}
        question = "Fetch this plan? [y/N]"
        status, screen = answer(terminal(env, tmp_path / "t1.sock"), ["pull", "org/tiny"], agent.home, question, "n")
        assert status == 1 and "not confirmed: nothing was done" in screen
        repo = Path(env["HF_HOME"]) / "hub" / "models--org--tiny"
        assert not repo.exists()
        status, screen = answer(terminal(env, tmp_path / "t2.sock"), ["pull", "org/tiny"], agent.home, question, "y")
        assert status == 0, screen
        assert commit in screen.replace("\n", "") and (repo / "refs" / "main").read_text() == commit
        assert (repo / "snapshots" / commit / "model.safetensors").is_file()
