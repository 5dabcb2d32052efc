"""The stall watch: what moves a model's progress clock, and when a quiet worker counts as wedged."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mlx_agent.gateway.models.stall import StallWatch


def quiet_for(watch: StallWatch, seconds: float) -> None:
    """Pretend the clock last moved ``seconds`` ago (no sleeping: the watch reads monotonic time)."""
    watch.last -= seconds
    if watch._cpu_mark is not None:
        pid, used, at = watch._cpu_mark
        watch._cpu_mark = (pid, used, at - seconds)


@pytest.mark.fast
def test_nothing_running_is_never_quiet_and_the_first_request_starts_the_clock() -> None:
    """The quiet time is None while no request runs; a request that starts running resets the clock."""
    watch = StallWatch(10)
    quiet_for(watch, 100)
    assert watch.quiet() is None and watch.stalled(os.getpid()) is None
    watch.begin(stream=True)
    quiet = watch.quiet()
    assert quiet is not None and quiet < 10


@pytest.mark.fast
def test_a_running_stream_with_no_byte_for_the_timeout_is_a_stall() -> None:
    """With a stream running, the stall is the quiet time alone once it reaches the timeout."""
    watch = StallWatch(10)
    watch.begin(stream=True)
    quiet_for(watch, 5)
    assert watch.stalled(os.getpid()) is None
    quiet_for(watch, 6)
    stalled = watch.stalled(os.getpid())
    assert stalled is not None and stalled >= 10


@pytest.mark.fast
def test_prompt_tokens_the_worker_reports_read_move_the_clock() -> None:
    """A larger prefill_tokens count from the same worker is progress; the same count or another pid's is not."""
    watch = StallWatch(10)
    watch.begin(stream=True)
    watch.prefilled(41, 100)
    quiet_for(watch, 20)
    watch.prefilled(41, 100)
    assert watch.stalled(41) is not None
    watch.prefilled(41, 2148)
    assert watch.stalled(41) is None
    quiet_for(watch, 20)
    watch.prefilled(42, 5000)  # a new worker's first report is its baseline
    assert watch.stalled(42) is not None


def test_with_only_plain_requests_a_worker_that_computes_is_not_wedged_and_a_stopped_one_is() -> None:
    """The CPU stand-in: marked at half the timeout, compared at the whole; a busy process passes, a sleeper fails."""
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        for pid, wedged in ((busy.pid, False), (idle.pid, True)):
            watch = StallWatch(1.0)
            watch.begin(stream=False)
            quiet_for(watch, 0.6)
            assert watch.stalled(pid) is None  # the mark
            spent = 0.0
            result = None
            while spent < 30 and (result is None) == wedged:  # real CPU time must pass: poll, do not assert on time
                subprocess.run([sys.executable, "-c", "pass"], check=True)  # let the busy process run a while
                spent += 0.5
                quiet_for(watch, 0.5)
                result = watch.stalled(pid)
            assert (result is not None) == wedged, (pid, result)
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()
