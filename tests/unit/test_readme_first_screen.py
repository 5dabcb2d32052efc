"""README's first screen is a path of real commands: each line names a command of the CLI with options it has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from mlx_agent.cli.app import cli

pytestmark = pytest.mark.fast

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## On a Mac: from nothing to an agent on a local model"


def first_screen() -> str:
    """Return the text of README's first section, up to the next heading."""
    text = README.read_text()
    start = text.index(SECTION)
    return text[start : text.index("\n## ", start + len(SECTION))]


def commands(section: str) -> list[list[str]]:
    """Return the words of each ``mlx-agent`` line of the section's shell block, comments left out."""
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the first screen has no sh block"
    lines = [shlex.split(line, comments=True) for line in block.group(1).splitlines()]
    return [words[1:] for words in lines if words[:1] == ["mlx-agent"]]


def resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """Walk the Click tree along ``words``; return the command reached and the words left for it."""
    command: click.Command = cli
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        sub = command.commands.get(words[0])
        assert sub is not None, f"mlx-agent has no command {words[0]!r} under {command.name!r}"
        command, words = sub, words[1:]
    return command, words


def test_the_path_is_models_pull_serve_start_then_run_claude() -> None:
    """The first screen walks the path the issue names, in order: models, pull, serve start, run claude."""
    paths = [resolve(words)[0].name for words in commands(first_screen())]
    assert paths == ["models", "pull", "start", "run"]
    run_words = commands(first_screen())[-1]
    assert run_words[:2] == ["run", "claude"]


def test_every_option_and_argument_on_the_first_screen_exists() -> None:
    """Each option a first-screen line passes is one its command declares, and its arguments fill its parameters."""
    for words in commands(first_screen()):
        command, rest = resolve(words)
        options = {opt for param in command.params for opt in param.opts if opt.startswith("-")}
        arguments = [p for p in command.params if isinstance(p, click.Argument)]
        positional: list[str] = []
        it = iter(rest)
        for word in it:
            if word.startswith("--"):
                assert word in options, f"`mlx-agent {' '.join(words)}`: {command.name} has no option {word}"
                param = next(p for p in command.params if word in p.opts)
                if not getattr(param, "is_flag", False):
                    next(it)
            else:
                positional.append(word)
        required = [a for a in arguments if a.required]
        assert len(positional) >= len(required), f"`mlx-agent {' '.join(words)}` leaves an argument out"


def test_the_questions_the_first_screen_quotes_are_the_ones_asked() -> None:
    """The two questions the first screen quotes are the verbs the CLI asks with, and `mlx-agent mcp` is a command."""
    section = first_screen()
    source = "".join(p.read_text() for p in (README.parent / "mlx_agent" / "cli").glob("*.py"))
    verbs = re.findall(r"`(\w+) this plan\? \[y/N\]`", section)
    assert sorted(verbs) == ["Fetch", "Launch"]
    for verb in verbs:
        asked = re.search(rf'preview_and_ask\(\s*"[\w.]+",\s*as_json,\s*"{verb}"', source)
        assert asked is not None, f"no command asks {verb!r}"
    assert "mlx-agent mcp" in section
    assert "mcp" in cli.commands
