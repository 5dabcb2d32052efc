"""Start-at-login units: launchd plists and systemd user units written from the plan and owned by receipts.

launchctl and systemctl are never run (mlx-agent only prints their commands), so these tests read the
written files back with plistlib and configparser.
"""

from __future__ import annotations

import json
import os
import plistlib
import shutil
from pathlib import Path

import pytest

from tests.conftest import Agent, free_port
from tests.units_support import ODD_NAME, install, read_unit, systemd_words


@pytest.fixture
def odd_model(tiny_model: Path, tmp_path: Path) -> Path:
    """Return a copy of the tiny model in a directory whose name has spaces, &, < and non-ASCII."""
    dest = tmp_path / ODD_NAME
    shutil.copytree(tiny_model, dest)
    return dest


def test_launchd_plist_runs_exactly_the_plan(agent: Agent, odd_model: Path, tmp_path: Path) -> None:
    """The plist's ProgramArguments, environment and logs are the plan's, with odd characters intact."""
    port = free_port()
    data = install(agent, "launchd", odd_model, port, tmp_path / "LaunchAgents", "--restart", "always")
    receipt = data["receipt"]
    assert isinstance(receipt, dict)
    plan = receipt["plan"]
    path = Path(receipt["unit"]["path"])
    assert path == tmp_path / "LaunchAgents" / f"com.mlx-agent.serve.{port}.plist"
    plist = plistlib.loads(path.read_bytes())
    assert plist["Label"] == f"com.mlx-agent.serve.{port}"
    assert plist["ProgramArguments"] == plan["argv"]
    assert plist["Program"] == os.path.realpath(plan["argv"][0])  # the reviewed file, argv[0] kept
    front = json.loads(Path(plan["front"]["config_path"]).read_text())  # written at confirm; the unit reads it
    assert str(odd_model) in front["models"][0]["worker"]["argv"]
    assert plist["EnvironmentVariables"] == plan["env"]
    assert plist["EnvironmentVariables"]["HF_HUB_OFFLINE"] == "1"
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] is True
    assert Path(plist["StandardOutPath"]).parent.is_dir()
    assert path.read_text() == plan["unit"]["content"]
    start = receipt["unit"]["commands"]["start"][0]
    assert start[:2] == ["launchctl", "bootstrap"] and start[2].startswith("gui/") and start[3] == str(path)


def test_keep_alive_follows_restart_policy(agent: Agent, tiny_model: Path) -> None:
    """--restart on-failure (the default) restarts only after a failed exit; never does not restart."""
    plan = agent.run("serve", "start", "--path", str(tiny_model), "--launchd", "--port", str(free_port())).data["plan"]
    assert plistlib.loads(plan["unit"]["content"].encode())["KeepAlive"] == {"SuccessfulExit": False}
    plan = agent.run(
        "serve", "start", "--path", str(tiny_model), "--launchd", "--restart", "never", "--port", str(free_port())
    ).data["plan"]
    assert plistlib.loads(plan["unit"]["content"].encode())["KeepAlive"] is False


def test_systemd_unit_runs_exactly_the_plan(agent: Agent, odd_model: Path, tmp_path: Path) -> None:
    """The unit's ExecStart and Environment parse back to the plan's argv and environment."""
    port = free_port()
    data = install(agent, "systemd", odd_model, port, tmp_path / "user")
    receipt = data["receipt"]
    assert isinstance(receipt, dict)
    plan = receipt["plan"]
    path = Path(receipt["unit"]["path"])
    assert path == tmp_path / "user" / f"mlx-agent-serve-{port}.service"
    unit = read_unit(path)
    reviewed = "@" + os.path.realpath(plan["argv"][0])  # run by the file argv[0] led to, argv[0] kept
    assert systemd_words(unit["Service"]["ExecStart"], dollar=True) == [reviewed, *plan["argv"]]
    env = dict(w.split("=", 1) for w in systemd_words(unit["Service"]["Environment"], dollar=False))
    assert env == plan["env"]
    assert unit["Service"]["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "default.target"
    assert receipt["unit"]["commands"]["start"] == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", f"mlx-agent-serve-{port}.service"],
    ]


def test_status_and_stop_of_a_unit(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """Status lists the unit; stop prints the stop command and keeps it; --uninstall removes it all."""
    port = free_port()
    data = install(agent, "launchd", tiny_model, port, tmp_path / "agents")
    unit_path = Path(data["receipt"]["unit"]["path"])  # type: ignore[index]
    server = agent.run("serve", "status").data["servers"][0]
    assert (server["state"], server["supervisor"], server["health"]) == ("installed", "launchd", "unreachable")
    stop = agent.run("serve", "stop", "--port", str(port))
    assert (stop.rc, stop.data["result"]) == (0, "stop_command_printed")
    assert stop.data["commands"][0][:2] == ["launchctl", "bootout"]
    assert unit_path.exists()
    again = agent.run("serve", "start", "--path", str(tiny_model), "--port", str(port))
    assert again.code == "port_in_use"
    front = data["receipt"]["plan"]["front"]  # type: ignore[index]
    assert Path(front["config_path"]).exists() and Path(front["token_path"]).exists()
    removed = agent.run("serve", "stop", "--port", str(port), "--uninstall")
    assert (removed.rc, removed.data["result"]) == (0, "uninstalled")
    assert not unit_path.exists()
    assert not Path(front["config_path"]).exists() and not Path(front["token_path"]).exists()
    assert agent.run("serve", "status").data["servers"] == []


def test_refuses_to_overwrite_a_unit_no_receipt_owns(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A unit file already at the path, not written by mlx-agent, is never overwritten."""
    port = free_port()
    agents = tmp_path / "agents"
    agents.mkdir()
    foreign = agents / f"com.mlx-agent.serve.{port}.plist"
    foreign.write_text("someone else's")
    result = agent.run(
        "serve", "start", "--path", str(tiny_model), "--port", str(port), "--launchd", "--unit-dir", str(agents)
    )
    assert (result.rc, result.code) == (1, "unit_not_owned")
    assert foreign.read_text() == "someone else's"


def test_uninstall_refuses_a_modified_unit(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A unit edited after install is not removed by --uninstall (unit_modified); its receipt stays."""
    port = free_port()
    data = install(agent, "systemd", tiny_model, port, tmp_path / "user")
    unit_path = Path(data["receipt"]["unit"]["path"])  # type: ignore[index]
    unit_path.write_text(unit_path.read_text() + "\n# edited by hand\n")
    assert agent.run("serve", "status").data["servers"][0]["state"] == "unit_modified"
    result = agent.run("serve", "stop", "--port", str(port), "--uninstall")
    assert (result.rc, result.code) == (1, "unit_modified")
    assert unit_path.exists() and (agent.serve_dir / f"{port}.json").exists()


def test_launchd_and_systemd_together_are_invalid(agent: Agent, tiny_model: Path) -> None:
    """--launchd and --systemd exclude each other; --restart needs one of them."""
    both = agent.run("serve", "start", "--path", str(tiny_model), "--launchd", "--systemd")
    assert (both.rc, both.code) == (2, "invalid_arguments")
    restart = agent.run("serve", "start", "--path", str(tiny_model), "--restart", "always")
    assert (restart.rc, restart.code) == (2, "invalid_arguments")


def test_unit_receipt_round_trips_through_json(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """The receipt on disk records the unit's sha256 and the commands, with no process fields."""
    port = free_port()
    install(agent, "launchd", tiny_model, port, tmp_path / "agents")
    receipt = json.loads((agent.serve_dir / f"{port}.json").read_text())
    assert receipt["supervisor"] == "launchd" and "pid" not in receipt
    assert len(receipt["unit"]["sha256"]) == 64
