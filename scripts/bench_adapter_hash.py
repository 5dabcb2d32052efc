"""Measure whether hashing an adapter file with ``sha256_file`` keeps up with coreutils ``sha256sum``.

Writes one 512 MB file of random bytes to a temporary directory, hashes it once with each to warm the page
cache (nothing is dropped: both read from memory), then times ``mlx_agent.files.sha256_file`` (in
this process) and ``sha256sum`` (a subprocess, whose start-up is part of its time) in interleaved rounds.
Prints the median throughput of each in MB/s and the ratio ours/sha256sum. Target: ratio >= 0.90. A miss
prints FAIL but does not change the exit status; exit 2 means the two digests differ or sha256sum is missing.

Usage (from the repository root): ``python scripts/bench_adapter_hash.py [--rounds N] [--mb N] [--tmpdir DIR]``
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlx_agent.files import CHUNK, sha256_file

TARGET_RATIO = 0.90


def write_random(path: Path, megabytes: int) -> None:
    """Write ``megabytes`` MB of random bytes (incompressible, so nothing can shortcut the read)."""
    block = 4 * 1000 * 1000
    total = megabytes * 1000 * 1000
    with open(path, "wb") as fh:
        written = 0
        while written < total:
            n = min(block, total - written)
            fh.write(os.urandom(n))
            written += n


def ours(path: Path) -> tuple[float, str]:
    """Return the seconds and digest of ``sha256_file``."""
    start = time.perf_counter()
    digest = sha256_file(path)
    return time.perf_counter() - start, digest


def coreutils(exe: str, path: Path) -> tuple[float, str]:
    """Return the seconds (process start-up included) and digest of ``sha256sum``."""
    start = time.perf_counter()
    out = subprocess.run([exe, str(path)], check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, out.split()[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--mb", type=int, default=512)
    parser.add_argument("--tmpdir", default=None)
    args = parser.parse_args()
    exe = shutil.which("sha256sum")
    if exe is None:
        print("sha256sum is not on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        path = Path(tmp) / "adapters.safetensors"
        write_random(path, args.mb)
        size_mb = path.stat().st_size / 1e6
        _, warm_ours = ours(path)  # warm-up: the page cache holds the file from here on
        _, warm_core = coreutils(exe, path)
        if warm_ours != warm_core:
            print(f"digests differ: ours {warm_ours}, sha256sum {warm_core}", file=sys.stderr)
            return 2
        ours_s: list[float] = []
        core_s: list[float] = []
        for i in range(args.rounds):
            for name in ("ours", "sha256sum") if i % 2 == 0 else ("sha256sum", "ours"):
                seconds, digest = ours(path) if name == "ours" else coreutils(exe, path)
                if digest != warm_ours:
                    print(f"{name} gave another digest in round {i}", file=sys.stderr)
                    return 2
                (ours_s if name == "ours" else core_s).append(seconds)
    ours_rate = size_mb / statistics.median(ours_s)
    core_rate = size_mb / statistics.median(core_s)
    ratio = ours_rate / core_rate
    print(f"file: {size_mb:.0f} MB of random bytes, page-cached; {args.rounds} interleaved rounds, medians")
    print(
        f"python {sys.version.split()[0]}, {hashlib.sha256().name} from OpenSSL "
        f"{__import__('ssl').OPENSSL_VERSION.split()[1]}, chunk {CHUNK // (1024 * 1024)} MiB"
    )
    print(f"sha256_file : {ours_rate:8.1f} MB/s  (rounds: {', '.join(f'{s:.3f}s' for s in ours_s)})")
    print(f"sha256sum   : {core_rate:8.1f} MB/s  (rounds: {', '.join(f'{s:.3f}s' for s in core_s)})")
    print(f"digest      : {warm_ours} (equal)")
    verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
    print(f"ratio ours/sha256sum = {ratio:.3f} (target >= {TARGET_RATIO:.2f}): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
