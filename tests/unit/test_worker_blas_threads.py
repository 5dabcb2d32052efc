"""A worker imports numpy with one OpenBLAS thread (its math is MLX's), unless its user chose otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# The worker's entry as a launched worker runs it, with a runtime whose start reports numpy's BLAS threads.
PROBE = """
import json, os, sys
from mlx_agent.runtime import entry

def start(argv):
    import numpy  # as the runtime's own imports load it (mlx_lm, transformers)
    threads = len(os.listdir("/proc/self/task"))
    print(json.dumps({"env": os.environ.get("OPENBLAS_NUM_THREADS"), "threads": threads}))
    return 0

entry.load_entry = lambda name: start
sys.exit(entry.main(["mlx_lm"]))
"""


def probe(**env: str) -> dict[str, object]:
    """Run the worker's entry in a fresh interpreter with ``env`` added; return what its start saw."""
    import json

    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**base, **env}, capture_output=True, text=True, check=True, timeout=60
    )
    found: dict[str, object] = json.loads(done.stdout)
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="threads are counted in /proc (Linux)")
def test_a_worker_loads_openblas_with_one_thread_and_a_users_choice_stands() -> None:
    """Unset, the entry sets one BLAS thread before numpy loads; a user's own setting is kept and honoured."""
    ours = probe()
    assert ours["env"] == "1"
    theirs = probe(OPENBLAS_NUM_THREADS="2")
    assert theirs["env"] == "2"
    assert isinstance(ours["threads"], int) and isinstance(theirs["threads"], int)
    assert theirs["threads"] == ours["threads"] + 1  # OpenBLAS started the second thread the user asked for
