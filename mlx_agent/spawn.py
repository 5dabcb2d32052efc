"""The one way mlx-agent starts a server process: its own session and process group, output to a private log.

The supervisor starts fronts with it and a front starts its workers with it. A worker also asks Linux to kill
it when its front dies (``die_with_parent``), so a front killed with SIGKILL leaves no loaded model behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Run first in the child's own, single-threaded process (no preexec_fn in a threaded parent): ask Linux to
# KILL it when the parent dies, give up if the parent is already gone, then exec the real program.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def with_parent_death_signal(argv: list[str]) -> list[str]:
    """Return the argv that starts ``argv`` so that, on Linux, it dies with this process."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *argv]


def open_log(log_path: Path) -> int:
    """Open (create) a private log for appending and return its descriptor; a link there is refused."""
    from mlx_agent.files import open_private, private_dir

    private_dir(log_path.parent)
    fd = open_private(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.fchmod(fd, 0o600)
    return fd


def spawn(
    argv: list[str],
    env_add: dict[str, str],
    log_path: Path,
    cwd: str | Path,
    *,
    die_with_parent: bool = False,
    header: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, stdout and stderr appended to ``log_path`` (after ``header``, if given).

    Linux ties the parent-death signal to the forking thread: call this from the thread that lives as long
    as the parent (a front's event loop), not from an executor.
    """
    fd = open_log(log_path)
    try:
        if header is not None:
            os.write(fd, header.encode() + b"\n")
        command = with_parent_death_signal(argv) if die_with_parent else argv
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env_add},
            cwd=cwd,
            start_new_session=True,
        )
    finally:
        os.close(fd)
