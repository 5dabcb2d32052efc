"""Python's cyclic garbage collector paused while a front or a worker starts, then frozen out of their objects.

A start imports aiohttp and the request bodies (a front) or mlx_lm, transformers and huggingface_hub (a
worker): about 100,000 objects that live as long as the process. The collector, run every 700 allocations,
scans them again and again while they are made: a quarter of a front's import CPU and a tenth of a worker's
on these machines (``scripts/bench_worker_start.py``; a load-on-request's latency, every eviction's reload).
Once the imports are done they are frozen (``gc.freeze``: left out of every later collection, which then scans
only what serving makes) and the collector runs as usual. The few cycles made while it was paused stay (about
1,000 objects in a worker).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the collector paused, then freeze what it made and resume collecting."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
