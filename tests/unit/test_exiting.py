"""Fronts and workers exit without the interpreter's teardown: exit callbacks and buffered output still happen."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = """
import atexit, sys, threading, time
from mlx_agent.exiting import exit_without_teardown

class TornDown:
    def __del__(self):
        print("torn down", flush=True)

kept = TornDown()  # a module global: only the interpreter's teardown frees it
atexit.register(print, "exit callback ran")
written = threading.Event()
threading.Thread(target=lambda: (written.wait(), time.sleep(0.1), print("thread finished", end=" "))).start()
sys.stdout.write("buffered out ")  # no newline: still in the pipe's buffer
sys.stderr.write("buffered err")
written.set()  # the thread's line comes after these, and the exit must wait for it
{ending}
"""


def run_child(ending: str) -> subprocess.CompletedProcess[str]:
    """Run the child with ``ending`` as its last line; return the finished process."""
    code = CHILD.format(ending=ending)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("status", "code"), [("3", 3), ("None", 0), ("0", 0)])
def test_the_status_callbacks_and_buffers_survive_and_the_teardown_is_skipped(status: str, code: int) -> None:
    """The status given (None: 0); a running thread waited for, atexit run, streams flushed; no module torn down."""
    child = run_child(f"exit_without_teardown({status})")
    assert child.returncode == code
    assert child.stdout == "buffered out thread finished exit callback ran\n" and child.stderr == "buffered err"


def test_a_normal_exit_tears_the_modules_down() -> None:
    """The control: sys.exit frees the module's objects (what exit_without_teardown leaves to the kernel)."""
    child = run_child("sys.exit(3)")
    assert child.returncode == 3 and "torn down" in child.stdout
