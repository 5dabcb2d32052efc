"""The front runs the reviewed interpreter file: a venv's link swapped for a script is refused, never run.

The worker's side is in test_hostile_confirm.py. Here the link is swapped between preview and confirm, and
after a unit's confirm, before the service manager starts (or restarts) the front: each time the front is
refused ``runtime_changed`` naming the link, and the script (which would leave a marker) never runs.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import RuntimeChanged
from mlx_agent.supervise.front import front_executable
from mlx_agent.wire import EXIT_REFUSED
from tests.conftest import Agent, free_port
from tests.integration.interpreter_support import cli, listeners, make_venv, swap_for_script
from tests.units_support import read_unit, systemd_words


def reviewed_cli(python: Path, agent: Agent, *args: str) -> dict[str, Any]:
    """Run ``mlx-agent ARGS --json`` by the file ``python`` led to at review, argv[0] kept (not through the link).

    A CLI started through the swapped link would run the script itself; started this way, a marker left
    behind can only come from something the CLI started (the front).
    """
    # python3's twin link, untouched: the reviewed file
    return cli(python, agent, *args, executable=os.path.realpath(python.parent / "python"))


def test_a_link_swapped_between_preview_and_confirm_is_refused_and_never_runs(
    agent: Agent, tiny_model: Path, tmp_path: Path
) -> None:
    """bin/python3 swapped for a script after the preview: confirm is runtime_changed (link_changed), nothing runs."""
    venv = make_venv(tmp_path / "venv")
    python = venv / "bin" / "python3"
    marker = tmp_path / "script-ran"
    port = free_port()
    args = ["serve", "start", "--path", str(tiny_model), "--port", str(port), "--max-tokens", "4"]
    preview = cli(python, agent, *args)
    assert preview["status"] == "ok", preview
    assert preview["data"]["plan"]["argv"][0] == str(python)
    swap_for_script(python, marker)
    reviewed_hash = preview["data"]["plan"]["preview_hash"]
    confirmed = reviewed_cli(python, agent, *args, "--confirm", "--preview-hash", reviewed_hash)
    assert confirmed["error"]["code"] == "runtime_changed", confirmed
    changed = confirmed["error"]["details"]["changed"]
    assert {"path": str(python), "reason": "link_changed"}.items() <= changed[0].items()
    assert not marker.exists(), "the swapped-in script ran"
    assert not listeners(port)


@pytest.mark.skipif(sys.platform != "linux", reason="systemd units, and the front's own link check, are Linux's")
def test_a_unit_started_after_the_link_was_swapped_refuses_and_never_runs_the_script(
    agent: Agent, tiny_model: Path, tmp_path: Path
) -> None:
    """A systemd unit's ExecStart, run as systemd runs it after the swap: the front exits runtime_changed, unheard."""
    venv = make_venv(tmp_path / "venv")
    python = venv / "bin" / "python3"
    marker = tmp_path / "script-ran"
    port = free_port()
    args = ["serve", "start", "--path", str(tiny_model), "--port", str(port), "--systemd"]
    args += ["--unit-dir", str(tmp_path / "units")]
    preview = cli(python, agent, *args)
    confirmed = cli(python, agent, *args, "--confirm", "--preview-hash", preview["data"]["plan"]["preview_hash"])
    assert confirmed["status"] == "ok", confirmed
    unit = read_unit(Path(confirmed["data"]["receipt"]["unit"]["path"]))
    prefixed, *argv = systemd_words(unit["Service"]["ExecStart"], dollar=True)
    assert (prefixed, argv[0]) == ("@" + os.path.realpath(python), str(python))  # systemd's "@FILE ARGV0"
    env = dict(w.split("=", 1) for w in systemd_words(unit["Service"]["Environment"], dollar=False))
    swap_for_script(python, marker)
    front = subprocess.run(
        argv,
        executable=prefixed[1:],
        env={**agent.env, **env},
        cwd=systemd_words(unit["Service"]["WorkingDirectory"], dollar=False)[0],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert front.returncode == EXIT_REFUSED, front.stderr[-3000:]
    assert "runtime_changed" in front.stderr and str(python) in front.stderr, front.stderr[-3000:]
    assert not marker.exists(), "the swapped-in script ran"
    assert not listeners(port)
    assert agent.run("serve", "stop", "--port", str(port), "--uninstall").data["result"] == "uninstalled"


def test_the_front_is_started_by_the_file_its_argv0_led_to_checked_by_content(tmp_path: Path) -> None:
    """front_executable returns the file argv[0] leads to, and refuses other content or a link swapped for a script."""
    venv = make_venv(tmp_path / "venv")
    python = venv / "bin" / "python3"
    reviewed = os.path.realpath(python)
    digest = hashlib.sha256(Path(reviewed).read_bytes()).hexdigest()
    plan: Any = {"argv": [str(python), "-m", "mlx_agent.gateway"], "front": {"interpreter_sha256": digest}}
    assert front_executable(plan) == reviewed
    with pytest.raises(RuntimeChanged) as other:
        other_plan: Any = {**plan, "front": {"interpreter_sha256": "0" * 64}}
        front_executable(other_plan)
    assert other.value.details["changed"][0]["reason"] == "content_changed"
    swap_for_script(python, tmp_path / "script-ran")
    with pytest.raises(RuntimeChanged) as swapped:
        front_executable(plan)
    assert {"path": str(python), "via": str(python)}.items() <= swapped.value.details["changed"][0].items()
