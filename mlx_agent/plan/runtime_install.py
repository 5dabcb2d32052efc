"""Where a runtime would be installed, and the refusal of a plan that needs one that is not (``runtime_not_installed``).

Read by the runtime selection of chat and media models alike (``runtime_select``, ``media_select``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from mlx_agent.errors.commands import RuntimeNotInstalled
from mlx_agent.installed import install_command, own_requirement, own_site_paths
from mlx_agent.plan.recipes import load_recipe
from mlx_agent.plan.runtime import runtime_site_paths
from mlx_agent.resources import PACKAGE_DIR

CHECKOUT = PACKAGE_DIR.parent  # a checkout's .venv is scripts/install's, which installs every runtime


def install_hint(runtime: str, executable: str | None) -> tuple[str, Path]:
    """Return the command that installs a runtime where it would run, and that environment's interpreter.

    That is this interpreter's environment, or the one of ``--runtime-executable`` (or runtimes.json).
    """
    paths = runtime_site_paths(runtime, executable)
    dist = load_recipe(runtime)[0]["distribution"]
    if paths is None:
        prefix, interpreter = Path(sys.prefix), Path(sys.executable)
        if prefix == CHECKOUT / ".venv" and (CHECKOUT / "uv.lock").is_file():
            return f"bash {CHECKOUT / 'scripts' / 'install'}", interpreter
    else:  # .../lib/python3.X/site-packages of the executable's environment
        prefix = Path(paths[0]).parents[2] if paths else Path(sys.prefix)
        interpreter = prefix / "bin" / "python"
    requirement = own_requirement(dist, own_site_paths()) or dist
    return install_command(requirement, prefix, interpreter), interpreter


def not_installed(runtime: str, executable: str | None, why: str) -> RuntimeNotInstalled:
    """Return the refusal of a plan that needs ``runtime`` where it is not installed, naming the command."""
    command, interpreter = install_hint(runtime, executable)
    return RuntimeNotInstalled(
        f"{why}; {load_recipe(runtime)[0]['distribution']} is not installed for {interpreter}",
        details={"runtime": runtime, "interpreter": str(interpreter), "install_command": command},
        remediation=f"Install it into that environment (mlx-agent never installs runtimes): {command}.",
    )
