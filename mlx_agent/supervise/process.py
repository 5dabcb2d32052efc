"""Spawning servers in their own process group, and recognising and stopping only our own processes.

A process is ours only when its pid, birth and exact argv all match the receipt; a pid alone is
never enough, and processes are never searched for by name.
"""

from __future__ import annotations

import contextlib
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping
    from typing import Any, Literal

    import psutil

    from mlx_agent.records.plan import ProcessIdentity

    State = Literal["running", "exited", "foreign"]

# Where the kernel gives no fixed birth (macOS, or a receipt written before ``start_ticks``), create times are
# compared: two reads of one process agree to well under this, while a reused pid is born at least a tick later.
CREATE_TIME_TOLERANCE = 0.005
CMDLINE_WAIT_SECONDS = 5.0


def identity(pid: int) -> ProcessIdentity:
    """Return the identity a receipt records for a live process.

    ``cmdline`` is what the kernel reports, which differs from the launched argv for a script with a
    shebang (the interpreter comes first); identity checks compare against it. Raises
    ``ProcessLookupError`` if the process has already ended.
    """
    import psutil

    deadline = time.monotonic() + CMDLINE_WAIT_SECONDS
    try:
        proc = psutil.Process(pid)
        # A child just spawned may still be inside execve, between dropping its old image and laying out the new
        # argv, when the kernel reports an empty cmdline; recorded so, the receipt would never match it again.
        while not (cmdline := proc.cmdline()) and time.monotonic() < deadline:
            if proc.status() == psutil.STATUS_ZOMBIE:
                raise ProcessLookupError(pid)
            time.sleep(0.005)
        found: ProcessIdentity = {
            "pid": pid,
            "pgid": os.getpgid(pid),
            "create_time": proc.create_time(),
            "cmdline": cmdline,
        }
    except psutil.NoSuchProcess as exc:  # includes a child that already exited and is a zombie
        raise ProcessLookupError(pid) from exc
    ticks = start_ticks(pid)
    if ticks is not None:
        found["start_ticks"] = ticks
    return found


def start_ticks(pid: int) -> int | None:
    """Return when ``pid`` was born in clock ticks since boot (Linux), or None where /proc does not say.

    psutil's create_time adds /proc/stat's boot time, which moves whenever the wall clock is stepped (a VM
    resumed, NTP): a receipt's create_time then no longer matches its own live server, which would be called
    foreign and left running. The kernel's tick count never changes for the life of a process.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses; the fields after its last ")" are plain.
    return int(text[text.rindex(b")") + 2 :].split()[19])


def _born_as(proc: psutil.Process, create_time: float, ticks: object) -> bool:
    if isinstance(ticks, int):
        now = start_ticks(proc.pid)
        if now is not None:
            return now == ticks
    return bool(abs(proc.create_time() - create_time) < CREATE_TIME_TOLERANCE)


def alive(pid: int, create_time: float, ticks: object = None) -> bool:
    """Say whether ``pid`` is still the process born then (not ended, not a reused pid); ``ticks``: its start_ticks."""
    import psutil

    try:
        proc = psutil.Process(pid)
        return bool(_born_as(proc, create_time, ticks) and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def classify(receipt: Mapping[str, Any]) -> State:
    """Say whether the receipt's process is still running, has exited, or the pid is now someone else's."""
    if os.path.isdir("/proc/self") and not os.path.exists(f"/proc/{receipt['pid']}"):
        # No such pid at all: settled without importing psutil, which would dominate `serve status` time.
        return "exited"
    import psutil

    try:
        proc = psutil.Process(receipt["pid"])
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return "exited"
            if proc.uids().real != os.getuid():
                return "foreign"  # another user's process is never ours to signal, whatever a receipt says
            same_birth = _born_as(proc, receipt["create_time"], receipt.get("start_ticks"))
            same = same_birth and proc.cmdline() == receipt.get("cmdline", receipt["argv"])
    except psutil.NoSuchProcess:
        return "exited"
    except psutil.AccessDenied:
        return "foreign"
    return "running" if same else "foreign"


def _group_members(pgid: int) -> list[psutil.Process]:
    import psutil

    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def _gone(proc: psutil.Process) -> bool:
    # A zombie has ended; whoever is its parent reaps it, and it can no longer be signalled into anything.
    import psutil

    try:
        return bool(proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if not _gone(p)]
    return alive


def stop_group(pid: int, pgid: int, *, grace: float = 10.0, child: subprocess.Popen[bytes] | None = None) -> str:
    """TERM the process group, wait up to ``grace`` seconds, then KILL; reap a child of ours.

    Only call this after the caller has matched the process against its receipt. Returns how it ended:
    ``terminated`` or ``killed``.
    """
    import signal
    import subprocess

    import psutil

    if pgid == os.getpgrp():
        raise RuntimeError("refusing to signal mlx-agent's own process group")
    members = _group_members(pgid)
    with contextlib.suppress(psutil.NoSuchProcess):
        members.append(psutil.Process(pid))
    how = "terminated"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=grace)
    alive = _wait_gone(members, grace if child is None else 0.5)
    if alive:
        how = "killed"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        _wait_gone(alive, 5.0)
    if child is not None:
        child.wait()
    return how
