"""Start-at-login units: a launchd plist (macOS) or a systemd user unit (Linux) for a reviewed server.

Both are rendered by libraries (plistlib, configparser), never by string formatting of markup, and both
run exactly the plan's argv and environment, by the interpreter file argv[0] led to at review (launchd's
``Program``, systemd's ``@`` prefix) with argv[0] kept: a restart never follows a link swapped since, and the
front refuses to start when its links no longer lead there. mlx-agent writes the file; the user runs the
printed launchctl or systemctl commands.
"""

from __future__ import annotations

import configparser
import io
import os
import plistlib
from pathlib import Path

from mlx_agent.errors import InvalidArguments

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.records.plan import ServePlan, UnitRecord

LAUNCHD = "launchd"
SYSTEMD = "systemd"
RESTART_POLICIES = ("on-failure", "always", "never")


def default_unit_dir(kind: str) -> Path:
    """Return where the user's session manager reads units of this kind."""
    if kind == LAUNCHD:
        return Path.home() / "Library" / "LaunchAgents"
    config = os.environ.get("XDG_CONFIG_HOME")
    return (Path(config) if config else Path.home() / ".config") / "systemd" / "user"


def unit_name(kind: str, port: int) -> str:
    """Return the launchd label or the systemd unit name of the server on ``port``."""
    return f"com.mlx-agent.serve.{port}" if kind == LAUNCHD else f"mlx-agent-serve-{port}.service"


def _keep_alive(restart: str) -> bool | dict[str, bool]:
    # launchd: KeepAlive true restarts always; {"SuccessfulExit": false} restarts only after a failure.
    if restart == "on-failure":
        return {"SuccessfulExit": False}
    return restart == "always"


def render_plist(label: str, argv: list[str], env: dict[str, str], log: str, cwd: str, restart: str) -> str:
    """Return the plist XML that runs ``argv`` at login."""
    document = {
        "Label": label,
        "Program": os.path.realpath(argv[0]),  # the reviewed file; ProgramArguments[0] stays argv[0]
        "ProgramArguments": argv,
        "EnvironmentVariables": env,
        "WorkingDirectory": cwd,
        "StandardOutPath": log,
        "StandardErrorPath": log,
        "RunAtLoad": True,
        "KeepAlive": _keep_alive(restart),
        "ProcessType": "Interactive",
    }
    return plistlib.dumps(document, sort_keys=True).decode("utf-8")


def _systemd_quote(word: str, *, dollar: bool) -> str:
    """Quote one word for a systemd command line: specifiers (%) always, variables ($) where expanded."""
    escaped = word.replace("%", "%%")
    if dollar:
        escaped = escaped.replace("$", "$$")
    if escaped and not any(c in escaped for c in " \t\n\"'\\;"):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_systemd(description: str, argv: list[str], env: dict[str, str], log: str, cwd: str, restart: str) -> str:
    """Return the systemd user unit that runs ``argv`` at login."""
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keep systemd's CamelCase keys
    unit["Unit"] = {"Description": description, "After": "network.target"}
    unit["Service"] = {
        "Type": "simple",
        # "@FILE ARGV0 ARGS": systemd runs the reviewed file with argv[0] kept (the venv is found from it).
        "ExecStart": " ".join(_systemd_quote(w, dollar=True) for w in ["@" + os.path.realpath(argv[0]), *argv]),
        "Environment": " ".join(_systemd_quote(f"{k}={v}", dollar=False) for k, v in sorted(env.items())),
        "WorkingDirectory": _systemd_quote(cwd, dollar=False),
        "StandardOutput": f"append:{log}".replace("%", "%%"),
        "StandardError": f"append:{log}".replace("%", "%%"),
        "Restart": {"never": "no"}.get(restart, restart),
        "KillMode": "control-group",
    }
    unit["Install"] = {"WantedBy": "default.target"}
    buffer = io.StringIO()
    unit.write(buffer, space_around_delimiters=False)
    return buffer.getvalue()


def commands(kind: str, name: str, path: Path) -> dict[str, list[list[str]]]:
    """Return the commands the user runs to start and to stop the unit (mlx-agent never runs them)."""
    if kind == LAUNCHD:
        domain = f"gui/{os.getuid()}"
        return {
            "start": [["launchctl", "bootstrap", domain, str(path)]],
            "stop": [["launchctl", "bootout", f"{domain}/{name}"]],
        }
    return {
        "start": [["systemctl", "--user", "daemon-reload"], ["systemctl", "--user", "enable", "--now", name]],
        "stop": [["systemctl", "--user", "disable", "--now", name]],
    }


def build_unit(kind: str, plan: ServePlan, unit_dir: str | None, log: str, restart: str) -> UnitRecord:
    """Return the plan's ``unit`` record: where the file goes, its exact content, and the commands."""
    if restart not in RESTART_POLICIES:
        raise InvalidArguments(f"--restart must be one of {', '.join(RESTART_POLICIES)}")
    directory = Path(unit_dir).expanduser().absolute() if unit_dir else default_unit_dir(kind)
    name = unit_name(kind, plan["port"])
    if kind == LAUNCHD:
        path = directory / f"{name}.plist"
        content = render_plist(name, plan["argv"], plan["env"], log, plan["cwd"], restart)
    else:
        path = directory / name
        content = render_systemd(
            f"mlx-agent server on {plan['base_url']}", plan["argv"], plan["env"], log, plan["cwd"], restart
        )
    return {
        "kind": kind,
        "name": name,
        "path": str(path),
        "restart": restart,
        "log_path": log,
        "content": content,
        "commands": commands(kind, name, path),
    }
