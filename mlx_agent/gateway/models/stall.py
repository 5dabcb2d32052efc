"""Whether a model's worker is still making progress on the requests it runs, or is wedged.

The progress signal is what the worker sends a running request: every byte of a reply (tokens, and mlx_lm's
``: keepalive N/M`` prefill comments, one per prefill step) moves the clock, and so do a request starting to
run and the prompt tokens our entry reports it read (``prefill_tokens`` of its progress file, ``progress.py``:
a non-streamed request's prefill too). A model with requests running whose clock has not moved for
``--stall-timeout`` seconds is wedged (``Lifecycle.check_stall`` replaces its worker). A non-streamed reply sends
nothing until it is complete, so while no running request streams, the worker's CPU time (its process and
children, from psutil) also counts: a worker that used less than ``CPU_FLOOR`` of a core over the second half of
the quiet time, and reported no prompt tokens read, is wedged; one that computes is not.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlx_agent.gateway.models.worker_stream import WorkerReply
    from mlx_agent.records.front import StallState

CPU_FLOOR = 0.01  # of one core, over the quiet time: a generating worker uses far more, a stopped one none


def cpu_seconds(pid: int) -> float | None:
    """Return the CPU time of the process ``pid`` and its children, or None when it cannot be read."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


class StallWatch:
    """The progress clock of one model's running requests."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.running = 0
        self.streams = 0  # running requests that stream (their tokens are seen as they come)
        self.last = time.monotonic()
        self.wedged = 0  # workers found wedged so far
        self.message: str | None = None  # why the last one was
        self.replies: set[WorkerReply] = set()
        self._cpu_mark: tuple[int, float, float] | None = None  # (pid, CPU seconds, when) in a quiet spell
        self._prefilled: tuple[int, int] | None = None  # (pid, prompt tokens read) as the worker last reported

    def begin(self, stream: bool) -> None:
        """Count a request that starts running; the first one starts the clock."""
        if self.running == 0:
            self.touch()
        self.running += 1
        self.streams += stream

    def end(self, stream: bool) -> None:
        """Uncount a running request."""
        self.running -= 1
        self.streams -= stream

    def touch(self) -> None:
        """Move the clock: the worker made progress."""
        self.last = time.monotonic()
        self._cpu_mark = None

    def prefilled(self, pid: int, count: object) -> None:
        """Move the clock when the worker ``pid`` reports more prompt tokens read than last time."""
        if not isinstance(count, int) or isinstance(count, bool):
            return
        last = self._prefilled
        self._prefilled = (pid, count)
        if last is not None and last[0] == pid and count > last[1]:
            self.touch()

    def watch(self, reply: WorkerReply) -> None:
        """Move the clock on every byte ``reply`` brings, until ``unwatch``."""
        reply.on_progress = self.touch
        self.replies.add(reply)

    def unwatch(self, reply: WorkerReply) -> None:
        """Stop watching ``reply``."""
        reply.on_progress = None
        self.replies.discard(reply)

    def state(self) -> StallState:
        """Return the watch as status shows it."""
        quiet = self.quiet()
        return {
            "stall_timeout": self.timeout,
            "quiet_s": None if quiet is None else round(quiet, 1),
            "wedged": self.wedged,
        }

    def quiet(self) -> float | None:
        """Return the seconds since the clock moved, or None while nothing runs."""
        return None if self.running == 0 else time.monotonic() - self.last

    def stalled(self, pid: int) -> float | None:
        """Return how long the worker ``pid`` has been quiet when that is a stall (module docstring), else None.

        Called every half second or so. With no stream running, the worker's CPU time is marked once half the
        timeout has passed quietly and compared when the whole has: work done since the mark is progress.
        """
        quiet = self.quiet()
        if quiet is None:
            return None
        if self.streams:
            return quiet if quiet >= self.timeout else None
        if quiet < self.timeout / 2:
            return None
        mark = self._cpu_mark
        if mark is None or mark[0] != pid:
            used = cpu_seconds(pid)
            self._cpu_mark = None if used is None else (pid, used, time.monotonic())
            return None
        if quiet < self.timeout:
            return None
        used = cpu_seconds(pid)
        if used is not None and used - mark[1] >= CPU_FLOOR * (time.monotonic() - mark[2]):
            self.touch()
            return None
        return quiet

    def abort(self, message: str) -> None:
        """End every watched reply with ``message`` (their clients get it as their error)."""
        for reply in list(self.replies):
            reply.close(message)
        self.replies.clear()
