"""The one way mlx-agent starts a server process: its own session and process group, output to a private log.

The supervisor starts fronts with it, a front starts its workers with it, ``lora train --confirm`` starts the
training watcher with it and the watcher its trainer. A worker and a trainer also ask Linux to kill them when
their parent dies (``die_with_parent``), so a front or watcher killed with SIGKILL leaves no loaded model and
no unrecorded training behind.

A worker is started by the file its plan reviewed (``executable``, what argv[0]'s links resolved to at preview),
with argv[0] kept: a venv's interpreter still finds its ``pyvenv.cfg`` beside argv[0], and a link swapped since
is never followed. The Linux wrapper itself runs this process's own binary (``/proc/self/exe``), not whatever
``sys.executable`` names now.

A front is started the same way: by the file its argv[0] leads to, if that is the plan's ``interpreter_sha256``
(``supervise.front.front_executable``), argv[0] kept; on Linux it also refuses to start when the links from its
argv[0] no longer lead to the file it runs (``interpreter_link_changes``): a venv's ``bin/python`` swapped for
a script after review is never run, at confirm or at a unit's restart.

A child started with ``awaits_word`` (a front at confirm) does nothing until its parent says ``go`` on its stdin
(``await_word``), which the parent does once it has recorded the child; a parent that dies first closes the pipe
and the child ends, so no process runs that no record names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.errors import RuntimeChanged

# Run first in the child's own, single-threaded process (no preexec_fn in a threaded parent): ask Linux to
# KILL it when the parent dies, give up if the parent is already gone, then exec the real program. The
# descriptor in argv[2] (or "-") is closed by that exec, which tells a waiting parent the program now runs.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "if sys.argv[2] != '-':\n"
    "    os.set_inheritable(int(sys.argv[2]), False)\n"
    "if sys.argv[3] == '-':\n"
    "    os.execvp(sys.argv[4], sys.argv[4:])\n"
    "os.execv(sys.argv[3], sys.argv[4:])\n"  # the reviewed file, argv[0] kept
)
# The running interpreter's own binary, which a link swapped under sys.executable cannot change.
SELF_EXE = "/proc/self/exe"
# Set in the environment of a child that waits for its parent's word before it does anything (``await_word``).
AWAIT_WORD_ENV = "MLX_AGENT_AWAIT_WORD"
WORD = b"go"


def running_interpreter() -> str | None:
    """Return the interpreter file this process runs, through every link (None where the system cannot say).

    Linux only: on macOS a framework build's ``bin/python`` is a stub that starts another binary, so the file
    running is never the one argv[0] leads to and the comparison would refuse every start.
    """
    return os.path.realpath(SELF_EXE) if os.path.exists(SELF_EXE) else None


def interpreter_link_changes() -> list[dict[str, Any]]:
    """Return a ``link_changed`` record when the links from ``sys.executable`` no longer lead to the running file.

    ``sys.executable`` is the argv[0] this process was started as (a venv's ``bin/python``); a process started
    through a link swapped since, or by the reviewed file after the link was swapped, finds them apart.
    """
    from mlx_agent.files import changed_links

    running = running_interpreter()
    if running is None or not sys.executable:
        return []
    return changed_links([{"path": running, "via": sys.executable}])


def interpreter_changed(changed: list[dict[str, Any]]) -> RuntimeChanged:
    """Return the ``runtime_changed`` refusal of a front whose interpreter is not the one reviewed."""
    from mlx_agent.errors import RuntimeChanged

    return RuntimeChanged(
        "the interpreter that runs the front is not the one reviewed: its links or its file changed since the "
        "plan was reviewed (details.changed names them); preview and confirm a new serve plan",
        details={"changed": changed},
    )


def refuse_if_interpreter_moved() -> None:
    """Refuse (``runtime_changed``) to go on in a process whose argv[0] links now lead to another file.

    A front checks it as it starts (a unit's restart, by the reviewed file, after its link was swapped).
    """
    changed = interpreter_link_changes()
    if changed:
        raise interpreter_changed(changed)


def with_parent_death_signal(argv: list[str], exec_fd: int | None = None, executable: str | None = None) -> list[str]:
    """Return the argv that starts ``argv`` so that, on Linux, it dies with this process.

    ``exec_fd``, a pipe's write end passed to the child, is closed when ``argv`` is exec'd. ``executable`` is
    the file exec'd with ``argv`` (None: ``argv[0]`` looked up as a command).
    """
    if not sys.platform.startswith("linux"):
        return argv
    fd = "-" if exec_fd is None else str(exec_fd)
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), fd, executable or "-", *argv]


def await_word() -> bool:
    """In a child started with ``awaits_word``: wait for the parent's ``go``; False when it ended without one.

    A child started without it returns True at once. The variable is dropped so this child's own children do
    not wait.
    """
    if os.environ.pop(AWAIT_WORD_ENV, None) is None:
        return True
    word = b""
    while len(word) < len(WORD):
        chunk = os.read(0, len(WORD) - len(word))
        if not chunk:
            return False  # end of file: the parent died or gave up before it recorded this process
        word += chunk
    return word == WORD


def send_word(child: subprocess.Popen[bytes]) -> None:
    """Tell a child started with ``awaits_word`` to go on; one that has already ended is left to its waiter."""
    assert child.stdin is not None
    try:
        child.stdin.write(WORD)
        child.stdin.close()
    except OSError:  # it ended (a broken pipe): whoever waits for its readiness reads why from its log
        pass


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
    stdin: int = subprocess.DEVNULL,
    until_exec: bool = False,
    executable: str | None = None,
    awaits_word: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, stdout and stderr appended to ``log_path`` (after ``header``, if given).

    ``stdin`` is nothing, or ``subprocess.PIPE`` for a child that waits for its parent's word. Linux ties the
    parent-death signal to the forking thread: call this from the thread that lives as long as the parent (a
    front's event loop), not from an executor. ``until_exec`` (with ``die_with_parent``) returns only once
    the child runs ``argv`` itself, or has ended, so the identity read next (pid, birth, command line) is the
    program's and not the Linux wrapper's; a front's event loop does not wait for that. ``executable`` is the
    reviewed file to run as ``argv[0]``. ``awaits_word`` gives the child a pipe on stdin and tells it to wait
    for ``send_word`` before it does anything.
    """
    fd = open_log(log_path)
    wait = until_exec and die_with_parent and sys.platform.startswith("linux")
    ready, exec_fd = os.pipe() if wait else (-1, -1)
    try:
        if header is not None:
            os.write(fd, header.encode() + b"\n")
        wrapped = die_with_parent and sys.platform.startswith("linux")
        if wrapped:
            command = with_parent_death_signal(argv, exec_fd if wait else None, executable)
            executable = SELF_EXE if os.path.exists(SELF_EXE) else None
        else:
            command = argv
        env = {**os.environ, **env_add}
        if awaits_word:
            env[AWAIT_WORD_ENV] = "1"
        child = subprocess.Popen(
            command,
            executable=executable,
            stdin=subprocess.PIPE if awaits_word else stdin,
            stdout=fd,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
            pass_fds=(exec_fd,) if wait else (),
        )
        if wait:
            os.close(exec_fd)
            exec_fd = -1
            os.read(ready, 1)  # end of file: the child exec'd argv, or ended
        return child
    finally:
        os.close(fd)
        for end in (ready, exec_fd):
            if end >= 0:
                os.close(end)
