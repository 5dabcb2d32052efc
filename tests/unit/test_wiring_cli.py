"""`wire AGENT`, `wire status` and `unwire` through the CLI: each refusal's code and exit status, nothing written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import Agent, free_port


@pytest.fixture
def cli(agent: Agent, tmp_path: Path) -> Agent:
    """Return a CLI runner whose HOME (the agents' configs) is a temporary directory of its own."""
    home = tmp_path / "user-home"
    home.mkdir()
    return Agent(agent.home, {**agent.env, "HOME": str(home), "CODEX_HOME": str(home / ".codex")})


def home_of(cli: Agent) -> Path:
    """Return the runner's HOME."""
    return Path(cli.env["HOME"])


@pytest.mark.parametrize(
    ("args", "code", "rc"),
    [
        (["wire", "cursor", "--port", "8080"], "unknown_agent", 2),
        (["wire", "codex", "--port", "8080", "--scope", "project"], "wire_scope_unsupported", 2),
        (["wire", "claude", "--port", "8080", "--confirm"], "preview_hash_required", 1),
        (["unwire", "claude"], "not_wired", 1),
        (["unwire", "emacs"], "unknown_agent", 2),
    ],
)
def test_refusals_without_a_server(cli: Agent, args: list[str], code: str, rc: int) -> None:
    """Each refusal that needs no server answers its own code and exit status, with a remediation."""
    result = cli.run(*args)
    assert (result.rc, result.code) == (rc, code), result.stdout
    assert result.doc["error"]["remediation"]
    assert not (home_of(cli) / ".claude").exists()


def test_no_server_of_ours_on_the_port_is_refused(cli: Agent) -> None:
    """Wiring a port where no server of ours runs is no_server, and no file is made."""
    port = free_port()
    result = cli.run("wire", "claude", "--port", str(port))
    assert result.rc == 1 and result.code == "no_server", result.stdout
    assert not (home_of(cli) / ".claude").exists() and not (cli.home / "wired").exists()


def test_a_settings_file_that_does_not_parse_is_refused_first(cli: Agent) -> None:
    """A broken settings file is agent_config_unparsable naming its line, before any server is asked."""
    settings = home_of(cli) / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{\n  "env": {\n    "A": 1,,\n  }\n}\n')
    result = cli.run("wire", "claude", "--port", str(free_port()))
    assert result.rc == 1 and result.code == "agent_config_unparsable", result.stdout
    assert result.doc["error"]["details"]["line"] == 3 and result.doc["error"]["details"]["path"] == str(settings)
    assert settings.read_text() == '{\n  "env": {\n    "A": 1,,\n  }\n}\n'


def test_status_with_nothing_wired(cli: Agent) -> None:
    """`wire status` with no wiring lists none."""
    result = cli.run("wire", "status")
    assert result.rc == 0 and result.data["wirings"] == []


@pytest.mark.parametrize("shape", ["deep", "huge"])
def test_a_settings_file_too_deep_or_too_large_is_an_envelope_not_a_traceback(cli: Agent, shape: str) -> None:
    """A settings.json nested 100,000 deep or of 200 MB is agent_config_unparsable at once, the file untouched."""
    settings = home_of(cli) / ".claude" / "settings.json"
    settings.parent.mkdir()
    if shape == "deep":
        settings.write_text('{"env": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        settings.write_text("{}")
        os.truncate(settings, 200 * 1024 * 1024)  # sparse: a read of it all would take seconds and gigabytes
    before = settings.stat()
    result = cli.run("wire", "claude", "--port", str(free_port()))
    assert (result.rc, result.code) == (1, "agent_config_unparsable"), result.stdout + result.stderr
    assert "Traceback" not in result.stderr and result.doc["error"]["details"]["path"] == str(settings)
    assert result.doc["error"]["details"].get("limit_bytes") == (None if shape == "deep" else 4 * 1024 * 1024)
    assert (settings.stat().st_size, settings.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
