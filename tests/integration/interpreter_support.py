"""The reviewed interpreter's tests' helpers: a venv of this checkout, a link swapped for a script, a CLI run by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import psutil

from tests.conftest import LAUNCHER, Agent


def make_venv(directory: Path) -> Path:
    """Create a real venv whose packages are this checkout's (a .pth its own site-packages reads); return it.

    The .pth works only where the interpreter found the venv (``pyvenv.cfg`` beside argv[0]): started by its
    base interpreter's path, the venv's python would not import mlx_agent at all.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(directory)], check=True, timeout=120)
    site = directory / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    ours = sysconfig.get_paths()["purelib"]
    (site / "mlx_agent_checkout.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return directory


def swap_for_script(link: Path, marker: Path) -> None:
    """Replace the link ``link`` by a script that leaves ``marker`` and then runs what the link named.

    It keeps argv[0], so the venv is still found and everything works as before: only the marker tells.
    """
    target = os.path.realpath(link)
    link.unlink()
    link.write_text(f'#!/bin/bash\ntouch {marker}\nexec -a "$0" {target} "$@"\n')
    link.chmod(0o755)


def cli(python: Path, agent: Agent, *args: str, executable: str | None = None) -> dict[str, Any]:
    """Run ``mlx-agent ARGS --json`` under ``python`` (argv[0]; started by ``executable`` if given): its envelope."""
    proc = subprocess.run(
        [str(python), str(LAUNCHER), *args, "--json"],
        executable=executable,
        capture_output=True,
        text=True,
        env=agent.env,
        cwd=agent.home,
        timeout=300,
    )
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def listeners(port: int) -> set[int]:
    """Return the pids listening on loopback ``port``."""
    return {
        c.pid
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid is not None
    }
