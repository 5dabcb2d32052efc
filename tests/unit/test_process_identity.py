"""The identity a receipt records for a process just spawned, and the match that later trusts it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from mlx_agent.supervise import process


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """Start a real child that lives until the test ends."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_an_identity_taken_mid_exec_waits_for_the_argv(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The empty cmdline of a child inside execve (a race under load, forced here) is waited out."""
    real = psutil.Process.cmdline
    empty_reads = iter(range(2))
    monkeypatch.setattr(
        psutil.Process, "cmdline", lambda self: [] if next(empty_reads, None) is not None else real(self)
    )
    found = process.identity(child.pid)
    assert found["cmdline"] == [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.undo()
    assert process.classify({**found, "argv": found["cmdline"]}) == "running"


def test_an_identity_of_a_child_that_ended_is_a_lookup_error(child: subprocess.Popen[bytes]) -> None:
    """A child that has ended but is not yet reaped (a zombie) has no identity to record."""
    child.kill()
    deadline = time.monotonic() + 10
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)  # the kill lands asynchronously
    with pytest.raises(ProcessLookupError):
        process.identity(child.pid)


def test_a_stepped_wall_clock_leaves_our_server_ours(
    child: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wall clock stepped a second after launch moves psutil's create_time, yet the receipt still matches."""
    import psutil._pslinux as linux

    found = process.identity(child.pid)
    receipt = {**found, "argv": found["cmdline"]}
    booted = linux.boot_time()
    monkeypatch.setattr(linux, "boot_time", lambda: booted + 1.0)  # how /proc/stat's btime moves with the clock
    assert abs(psutil.Process(child.pid).create_time() - found["create_time"]) >= 1.0
    assert process.classify(receipt) == "running"
    assert process.alive(child.pid, found["create_time"], found.get("start_ticks"))
    without_ticks = {k: v for k, v in receipt.items() if k != "start_ticks"}
    assert process.classify(without_ticks) == "foreign"  # what a create_time-only check concludes


def test_another_birth_in_the_same_instant_is_foreign(child: subprocess.Popen[bytes]) -> None:
    """A receipt whose start_ticks differ from the live process is foreign even when create_time and argv agree."""
    found = process.identity(child.pid)
    assert isinstance(found.get("start_ticks"), int)
    receipt = {**found, "argv": found["cmdline"], "start_ticks": found.get("start_ticks", 0) + 1}
    assert process.classify(receipt) == "foreign"
    assert not process.alive(child.pid, found["create_time"], receipt["start_ticks"])


def test_start_ticks_survive_a_command_name_with_parentheses() -> None:
    """The birth is read past the last ")" of /proc/PID/stat, so a process may name itself anything."""
    renamer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; sys.stdin.readline(); open('/proc/self/comm', 'w').write('a) b (c');"
            " print(flush=True); time.sleep(60)",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        before = process.start_ticks(renamer.pid)
        assert renamer.stdin is not None and renamer.stdout is not None
        renamer.stdin.write(b"\n")
        renamer.stdin.flush()
        renamer.stdout.readline()
        assert psutil.Process(renamer.pid).name() == "a) b (c"
        assert before is not None and process.start_ticks(renamer.pid) == before
    finally:
        renamer.kill()
        renamer.wait()
