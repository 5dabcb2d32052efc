"""Time ``mlx-agent models --json`` over 50 cached models against ``huggingface_hub.scan_cache_dir`` alone.

In one run, with a temporary ``HF_HOME`` holding 50 tiny models in the hub cache layout (``build_hf_cache_repo``
of tests/fixtures/tiny_model.py) and an empty ``MLX_AGENT_HOME``, this times in interleaved rounds (median of
each), each as a fresh process:

* ``python -c "scan_cache_dir()"``   (huggingface_hub's own scan of the same cache: the baseline)
* ``mlx-agent models --json``        (the listing: resolution, runtime auto, templates, headers, receipts)

The ratio is the median of the per-round ratios, printed with the rounds' min and max, beside both medians.
Target: ``models --json`` within 1 s for 50 models (PASS/FAIL is printed; wall times on a shared machine are
noisy, so a miss does not change the exit status). The run exits 1 if the listing is not 50 complete rows.

Usage (from the repository root): ``python scripts/bench_models.py [--rounds N] [--models N]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
LAUNCHER = REPO / "scripts" / "mlx-agent"
TARGET_S = 1.0
SCAN = "from huggingface_hub import scan_cache_dir; print(len(scan_cache_dir().repos))"


def build_cache(root: Path, count: int) -> None:
    """Lay out ``count`` tiny models in the hub cache under ``root / "hf"`` (one model built, copied per repo)."""
    from tests.fixtures.tiny_model import build_hf_cache_repo, build_tiny_model

    model = build_tiny_model(root / "tiny")
    for index in range(count):
        build_hf_cache_repo(root / "hf", f"bench/tiny-{index:02d}", model)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Return one run's wall time and its stdout, failing loudly on a non-zero exit."""
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--models", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-models-") as tmp:
        root = Path(tmp)
        build_cache(root, args.models)
        env = {**os.environ, "HF_HOME": str(root / "hf"), "MLX_AGENT_HOME": str(root / "home")}
        for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "PYTHONDONTWRITEBYTECODE"):
            env.pop(var, None)
        commands = {
            "scan_cache_dir": [sys.executable, "-c", SCAN],
            "models --json": [sys.executable, str(LAUNCHER), "models", "--json"],
        }
        _, listing = timed(commands["models --json"], env)  # warm-up: bytecode written, as on a user's machine
        timed(commands["scan_cache_dir"], env)
        rows = json.loads(listing)["data"]["models"]
        complete = sum(1 for row in rows if row["complete"] and row["runtime"])
        times: dict[str, list[float]] = {name: [] for name in commands}
        for index in range(args.rounds):
            order = list(commands) if index % 2 == 0 else list(reversed(commands))
            for name in order:
                times[name].append(timed(commands[name], env)[0])
        ratios = [m / s for m, s in zip(times["models --json"], times["scan_cache_dir"], strict=True)]
    print(f"{args.models} cached tiny models, {args.rounds} rounds, each a fresh process (median, min-max):")
    for name, values in times.items():
        print(f"  {name:<16} {statistics.median(values):6.3f} s  ({min(values):.3f}-{max(values):.3f})")
    print(f"  ratio models/scan {statistics.median(ratios):6.2f}x  ({min(ratios):.2f}-{max(ratios):.2f})")
    median = statistics.median(times["models --json"])
    print(f"target models --json <= {TARGET_S:.1f} s: {'PASS' if median <= TARGET_S else 'FAIL'} ({median:.3f} s)")
    if complete != args.models:
        print(f"error: {complete} of {args.models} rows are complete and servable", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
