"""Measure whether full hashing keeps up with coreutils ``sha256sum``: adapter files and ``--verify-weights``.

Writes one 512 MB file of random bytes to a temporary directory, hashes it once with each to warm the page
cache (nothing is dropped: both read from memory), then times ``mlx_agent.files.sha256_file`` (in
this process) and ``sha256sum`` (a subprocess, whose start-up is part of its time) in interleaved rounds.
Then does the same for ``--verify-weights``: ``with_digests`` over a model directory of two weight shards of
half the size, with a progress watcher attached as the CLI's bar is, against ``sha256sum`` of both shards.
Prints the median throughput of each in MB/s and the ratios ours/sha256sum. Target: ratio >= 0.90. A miss
prints FAIL but does not change the exit status; exit 2 means the digests differ or sha256sum is missing.

Usage (from the repository root): ``python scripts/bench_adapter_hash.py [--rounds N] [--mb N] [--tmpdir DIR]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlx_agent.files import CHUNK, sha256_file
from mlx_agent.identity import HASH_PROGRESS, directory_identity, with_digests

TARGET_RATIO = 0.90


def write_random(path: Path, megabytes: int, header: bool = False) -> None:
    """Write ``megabytes`` MB of random bytes (incompressible, so nothing can shortcut the read).

    ``header`` starts the file with a safetensors header describing the bytes as one uint8 tensor.
    """
    block = 4 * 1000 * 1000
    total = megabytes * 1000 * 1000
    with open(path, "wb") as fh:
        if header:
            meta = json.dumps({"w": {"dtype": "U8", "shape": [total], "data_offsets": [0, total]}}).encode()
            fh.write(struct.pack("<Q", len(meta)) + meta)
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


def verify(model: Path) -> tuple[float, str]:
    """Return the seconds of ``with_digests`` over ``model`` (progress watched) and its weights' digests."""
    source = {"kind": "path", "path": str(model), "files": directory_identity(model)}
    updates = []
    token = HASH_PROGRESS.set(lambda done, total: updates.append(done))
    try:
        start = time.perf_counter()
        files = with_digests(source)["files"]
        seconds = time.perf_counter() - start
    finally:
        HASH_PROGRESS.reset(token)
    return seconds, " ".join(f["sha256"] for f in files if f["name"].endswith(".safetensors"))


def coreutils(exe: str, *paths: Path) -> tuple[float, str]:
    """Return the seconds (process start-up included) and digests of ``sha256sum``."""
    start = time.perf_counter()
    out = subprocess.run([exe, *map(str, paths)], check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, " ".join(line.split()[0] for line in out.splitlines())


def compare(
    name: str, timed: Callable[[], tuple[float, str]], core: Callable[[], tuple[float, str]], mb: float, rounds: int
) -> float | None:
    """Time ``timed`` and ``core`` in interleaved rounds after a warm-up; print and return the ratio of rates."""
    _, warm_ours = timed()  # warm-up: the page cache holds the files from here on
    _, warm_core = core()
    if warm_ours != warm_core:
        print(f"{name}: digests differ: ours {warm_ours}, sha256sum {warm_core}", file=sys.stderr)
        return None
    ours_s: list[float] = []
    core_s: list[float] = []
    for i in range(rounds):
        for who in ("ours", "sha256sum") if i % 2 == 0 else ("sha256sum", "ours"):
            seconds, digest = timed() if who == "ours" else core()
            if digest != warm_ours:
                print(f"{name}: {who} gave another digest in round {i}", file=sys.stderr)
                return None
            (ours_s if who == "ours" else core_s).append(seconds)
    ours_rate = mb / statistics.median(ours_s)
    core_rate = mb / statistics.median(core_s)
    ratio = ours_rate / core_rate
    print(f"{name:<14}: {ours_rate:8.1f} MB/s  (rounds: {', '.join(f'{s:.3f}s' for s in ours_s)})")
    print(f"{'sha256sum':<14}: {core_rate:8.1f} MB/s  (rounds: {', '.join(f'{s:.3f}s' for s in core_s)})")
    verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
    print(f"ratio {name}/sha256sum = {ratio:.3f} (target >= {TARGET_RATIO:.2f}): {verdict}")
    return ratio


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
    print(
        f"python {sys.version.split()[0]}, {hashlib.sha256().name} from OpenSSL "
        f"{__import__('ssl').OPENSSL_VERSION.split()[1]}, chunk {CHUNK // (1024 * 1024)} MiB; "
        f"{args.rounds} interleaved rounds, medians, page-cached random bytes"
    )
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as tmp:
        path = Path(tmp) / "adapters.safetensors"
        write_random(path, args.mb)
        print(f"adapter file: {args.mb} MB")
        single = compare("sha256_file", lambda: ours(path), lambda: coreutils(exe, path), args.mb, args.rounds)
        path.unlink()
        model = Path(tmp) / "model"
        model.mkdir()
        shards = [model / f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
        for shard in shards:
            write_random(shard, args.mb // 2, header=True)
        (model / "config.json").write_text("{}")
        print(f"--verify-weights: 2 shards of {args.mb // 2} MB")
        weights = compare("with_digests", lambda: verify(model), lambda: coreutils(exe, *shards), args.mb, args.rounds)
    return 0 if single is not None and weights is not None else 2


if __name__ == "__main__":
    sys.exit(main())
