"""Measure what transformers' saved index and the paused collector take off a worker's and a front's start.

1. A worker's import, up to its argument parser (``python -m mlx_agent.runtime mlx_lm --help``: mlx_lm.server,
   transformers, mlx), is timed in interleaved rounds with an empty user cache (each round a fresh
   ``XDG_CACHE_HOME``, so transformers scans its ~3,300 model files) and with the index saved by a warm-up run.
2. The CPU time (the child's rusage, steadier than wall time on a shared machine) of the same worker import, and
   of a front's (``mlx_agent.gateway.door.app`` and uvloop, what its ``main`` imports), with the cyclic collector
   paused as they start (``mlx_agent.startup_gc``) and with ``collector_paused`` replaced by a no-op.
3. The CPU time of the worker import with the entry's one OpenBLAS thread and with one a core (what numpy
   starts unless told: ``OPENBLAS_NUM_THREADS`` set to the core count, which the entry then leaves alone).

Prints each median with min and max and each ratio (median of per-round ratios). Information only: no target,
and the exit status says nothing about the figures.

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
NO_PAUSE = "import contextlib, mlx_agent.startup_gc as g; g.collector_paused = contextlib.nullcontext\n"
WORKER = (
    "import runpy, sys; sys.argv = ['x', 'mlx_lm', '--help']; "
    "runpy.run_module('mlx_agent.runtime', run_name='__main__')"
)
FRONT = (
    "from mlx_agent.startup_gc import collector_paused\n"
    "with collector_paused():\n"
    "    import mlx_agent.gateway.door.app, uvloop"
)


def child_env(**extra: str) -> dict[str, str]:
    """Return this environment with ``extra``, bytecode written and used as on a user's machine."""
    env = {**os.environ, **extra}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def start(cache: Path) -> float:
    """Run the worker's import once with ``cache`` as the user's cache; return its wall time in seconds."""
    env = child_env(XDG_CACHE_HOME=str(cache))
    began = time.perf_counter()
    subprocess.run(ARGV, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - began


def cpu_of(code: str, **extra: str) -> float:
    """Run ``python -c code`` once (its output discarded); return the child's user + system CPU in seconds."""
    child = subprocess.Popen([sys.executable, "-c", code], env=child_env(**extra), stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the measured start failed: {code!r}")
    return usage.ru_utime + usage.ru_stime


def print_pair(label: str, base: list[float], new: list[float], new_label: str, base_label: str) -> None:
    """Print both medians with min and max and the median per-round ratio new / base."""
    for name, times in ((base_label, base), (new_label, new)):
        print(f"{label} {name:25s} median {statistics.median(times):.3f} s  min {min(times):.3f}  max {max(times):.3f}")
    ratios = [n / b for n, b in zip(new, base, strict=True)]
    spread = f"min {min(ratios):.2f}, max {max(ratios):.2f}; {len(ratios)} rounds"
    print(f"{label} {new_label} / {base_label}: {statistics.median(ratios):.2f} ({spread})")


def collector_rounds(rounds: int) -> None:
    """Time the worker's and the front's imports with the collector paused and not, interleaved."""
    for label, code in (("worker", WORKER), ("front", FRONT)):
        cpu_of(code)  # writes bytecode, and the transformers index
        paused: list[float] = []
        running: list[float] = []
        for r in range(rounds):
            order = [(paused, code), (running, NO_PAUSE + code)]
            for times, run in order if r % 2 == 0 else reversed(order):
                times.append(cpu_of(run))
        print_pair(f"{label} import CPU,", running, paused, "collector paused", "collector running")


def blas_rounds(rounds: int) -> None:
    """Time the worker's import with one OpenBLAS thread (the entry's) and one a core, interleaved."""
    cores = str(os.cpu_count() or 1)
    one: list[float] = []
    each: list[float] = []
    for r in range(rounds):
        order = [(one, {}), (each, {"OPENBLAS_NUM_THREADS": cores})]
        for times, extra in order if r % 2 == 0 else reversed(order):
            times.append(cpu_of(WORKER, **extra))
    print_pair("worker import CPU,", each, one, "one BLAS thread", f"{cores} BLAS threads")


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
    print_pair("worker import wall,", cold, warm, "warm (index read)", "cold (transformers scans)")
    collector_rounds(rounds)
    blas_rounds(rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
