"""Fronts and workers exit without the interpreter's teardown: exit callbacks and buffered output still happen."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = """
import atexit, concurrent.futures, sys, threading, time
from mlx_agent.exiting import exit_without_teardown

class TornDown:
    def __del__(self):
        print("torn down", flush=True)

kept = TornDown()  # a module global: only the interpreter's teardown frees it
atexit.register(print, "exit callback ran")
idle = concurrent.futures.ThreadPoolExecutor(1)  # its worker thread waits for work until told to stop
idle.submit(print, "executor ran", end=" ").result()
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
    """The status given; running threads waited for, idle executors ended, atexit run, streams flushed, no teardown."""
    child = run_child(f"exit_without_teardown({status})")
    assert child.returncode == code
    assert (
        child.stdout == "executor ran buffered out thread finished exit callback ran\n"
        and child.stderr == "buffered err"
    )


def test_a_normal_exit_tears_the_modules_down() -> None:
    """The control: sys.exit frees the module's objects (what exit_without_teardown leaves to the kernel)."""
    child = run_child("sys.exit(3)")
    assert child.returncode == 3 and "torn down" in child.stdout


@pytest.mark.parametrize("ending", ["exit_without_teardown(0)", "sys.exit(0)"])
def test_output_that_cannot_be_written_fails_the_exit_as_python_does(ending: str) -> None:
    """Buffered output to a pipe nobody reads makes the exit status 120 and says so on stderr, like a normal exit."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    code = "import sys\nfrom mlx_agent.exiting import exit_without_teardown\nsys.stdout.write('unread')\n" + ending
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    try:
        child = subprocess.run(
            [sys.executable, "-c", code], stdout=write_end, stderr=subprocess.PIPE, text=True, env=env, timeout=60
        )
    finally:
        os.close(write_end)
    assert child.returncode == 120 and "Broken pipe" in child.stderr
