"""Entry point of a launched worker: ``python -m mlx_agent.runtime RUNTIME [the runtime's arguments...]``.

``ENTRIES`` is the one table from a runtime's name to the function that starts its worker, written as
``module:function`` (uvicorn's ``HTTP_PROTOCOLS`` in ``config.py``) and imported only when chosen, so a worker
imports its own runtime and no other. The names are the recipes' (``recipes/NAME.json``) and the plan's
``runtime.name``; tests/unit/test_recipes.py holds the table to the recipes that name a wrapper.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

ENTRIES: dict[str, str] = {
    "mlx_lm": "mlx_agent.runtime.entries.mlx_lm_entry:main",
    "mlx-vlm": "mlx_agent.runtime.entries.mlx_vlm_server:serve",
    "mlx-vlm-embed": "mlx_agent.runtime.entries.mlx_vlm_embed:serve",
    "mlx-vlm-speech": "mlx_agent.runtime.entries.mlx_vlm_media:speech",
    "mlx-vlm-transcription": "mlx_agent.runtime.entries.mlx_vlm_media:transcription",
    "mlx-vlm-image": "mlx_agent.runtime.entries.mlx_vlm_media:image_generation",
}

USAGE = f"usage: python -m mlx_agent.runtime {{{'|'.join(ENTRIES)}}} [the runtime server's arguments...]"


def load_entry(name: str) -> Callable[[list[str]], int]:
    """Import and return the start function ``ENTRIES`` names for a runtime."""
    module, _, function = ENTRIES[name].partition(":")
    start: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return start


def main(argv: list[str]) -> int:
    """Run the named runtime's worker with our wrapping; return the process exit status."""
    if not argv or argv[0] not in ENTRIES:
        print(USAGE, file=sys.stderr)
        return 2
    # numpy's OpenBLAS (Linux wheels) starts a thread per core as it loads, ~70 ms of CPU on every worker's start; a
    # worker's math is MLX's, and what it asks of numpy is elementwise. Read once, at load: before any import below.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from mlx_agent.runtime import transformers_index

    transformers_index.install()  # before the runtime imports transformers: its index of model files, saved once
    start = load_entry(argv[0])
    return start(argv[1:])
