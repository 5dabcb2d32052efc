"""Measure what transformers' saved index of its model files takes off a worker's start.

A worker's import, up to its argument parser (``python -m mlx_agent.runtime mlx_lm --help``: mlx_lm.server,
transformers, mlx), is timed in interleaved rounds with an empty user cache (each round a fresh
``XDG_CACHE_HOME``, so transformers scans its ~3,300 model files) and with the index saved by a warm-up run.
Prints each median with min and max and the ratio warm / cold (median of per-round ratios). Information only:
no target, and the exit status says nothing about the figures.

Usage (from the repository root): ``python scripts/bench_worker_start.py [--rounds N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARGV = [sys.executable, "-m", "mlx_agent.runtime", "mlx_lm", "--help"]


def start(cache: Path) -> float:
    """Run the worker's import once with ``cache`` as the user's cache; return its wall time in seconds."""
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    began = time.perf_counter()
    subprocess.run(ARGV, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def main() -> int:
    """Time cold and warm starts side by side and print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as tmp:
        warm_cache = Path(tmp) / "warm"
        start(warm_cache)  # writes the index (and bytecode)
        cold: list[float] = []
        warm: list[float] = []
        for r in range(rounds):  # alternate which runs first
            order = [(cold, Path(tmp) / f"cold-{r}"), (warm, warm_cache)]
            for times, cache in order if r % 2 == 0 else reversed(order):
                times.append(start(cache))
    for label, times in (("cold (transformers scans)", cold), ("warm (index read)", warm)):
        print(f"{label:26s} median {statistics.median(times):.3f} s  min {min(times):.3f}  max {max(times):.3f}")
    ratios = [w / c for w, c in zip(warm, cold, strict=True)]
    spread = f"min {min(ratios):.2f}, max {max(ratios):.2f}; {rounds} rounds"
    print(f"warm / cold: {statistics.median(ratios):.2f} ({spread})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
