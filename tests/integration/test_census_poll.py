"""scripts/census_tests.py's reading of /proc on a real child process: a fork's kind, and a zombie's."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.census_support import census_module
from tests.conditions import wait_until


def test_a_child_of_the_runners_kind_keeps_it_as_a_zombie() -> None:
    """A child read again while it looks like its parent keeps its kind as a zombie (whose command line is empty)."""
    census = census_module()
    me = os.getpid()
    run = census.Census(root=me)
    mine = (me, int(census.stat(me)[19]))  # a process is known by its pid and start time
    run.procs[mine] = census.Proc("pytest", os.getppid())
    run.live[me] = mine
    before = {int(name) for name in os.listdir("/proc") if name.isdigit()}
    # Named like the runner, as a fork is before it execs: read again at every poll (Census.provisional).
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "-m", "pytest"], stdin=subprocess.PIPE
    )
    try:
        seen = run.poll(before)
        key = run.live[child.pid]
        # Read mid-exec its command line can be empty (other, read again at the next poll): the fork's look is next.
        wait_until(lambda: run.poll(seen) and run.procs[key].kind == "pytest", "the child read as the runner's kind")
        assert run.provisional(run.procs[key])
        assert child.stdin is not None
        child.stdin.close()
        wait_until(lambda: (census.stat(child.pid) or ["gone"])[0] == "Z", "the child is a zombie, not yet reaped")
        run.poll(seen)
        assert run.procs[key].kind == "pytest"
    finally:
        child.kill()
        child.wait()
