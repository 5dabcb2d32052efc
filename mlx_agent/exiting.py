"""Ending a front, a worker or a quick CLI command without the interpreter's teardown of every module.

A worker holds mlx_lm, transformers, huggingface_hub and the model's arrays; a front aiohttp and the request
bodies. Once their main function has returned there is nothing left to do, yet the interpreter's shutdown
frees every module's objects one by one and runs the collector: about 0.2 s of CPU at each worker's stop,
unload or eviction (0.1 s for a front), and longer for a large model's arrays, for memory the kernel reclaims
at exit anyway. The CLI's click-free ``--json`` commands (``serve status``, ``stop``, ``unload``, ``policy``,
``logs``, ``lora status``, previews), which agents run in loops, end the same way: their hundred modules'
teardown was a tenth of such a command's time. Here the exit callbacks still run (threading's, then logging's
flush among atexit's) and the standard streams are flushed, then the process exits with its status.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn


def exit_without_teardown(status: int | None) -> NoReturn:
    """Exit with ``status`` (None: 0) as ``sys.exit`` would after ``main`` returned, less the modules' teardown."""
    threading = sys.modules.get("threading")  # never imported: no thread but this one to wait for (the CLI's case)
    if threading is not None:
        # What a normal exit does first: threading's own exit callbacks (they tell idle executors' threads to
        # stop), then it waits for every thread that is not a daemon.
        threading._shutdown()
    atexit._run_exitfuncs()  # logging.shutdown, temp files removed
    status = status or 0
    for stream in (s for s in (sys.stdout, sys.stderr) if s is not None and not getattr(s, "closed", False)):
        try:
            stream.flush()
        except OSError as exc:  # a reader gone (a broken pipe): what is left is lost, and said, as Python does
            with contextlib.suppress(OSError):
                os.write(2, f"Exception ignored flushing {getattr(stream, 'name', 'a stream')}: {exc!r}\n".encode())
            status = status or 120
    os._exit(status)
