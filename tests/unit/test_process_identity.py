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
