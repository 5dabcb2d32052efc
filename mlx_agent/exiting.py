"""Ending a front or a worker process without the interpreter's teardown of every module.

A worker holds mlx_lm, transformers, huggingface_hub and the model's arrays; a front aiohttp and the request
bodies. Once their main function has returned there is nothing left to do, yet the interpreter's shutdown
frees every module's objects one by one and runs the collector: about 0.2 s of CPU at each worker's stop,
unload or eviction (0.1 s for a front), and longer for a large model's arrays, for memory the kernel reclaims
at exit anyway. Here the exit callbacks still run (logging's flush among them) and the standard streams are
flushed, then the process exits with its status.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_without_teardown(status: int | None) -> NoReturn:
    """Exit with ``status`` (None: 0) as ``sys.exit`` would after ``main`` returned, less the modules' teardown."""
    for thread in threading.enumerate():  # a normal exit waits for these first, then runs the callbacks
        if not thread.daemon and thread is not threading.current_thread():
            thread.join()
    atexit._run_exitfuncs()  # logging.shutdown, executors joined, temp files removed
    for stream in (s for s in (sys.stdout, sys.stderr) if s is not None):
        with contextlib.suppress(OSError, ValueError):  # closed or broken: a normal exit would lose it too
            stream.flush()
    os._exit(0 if status is None else status)
