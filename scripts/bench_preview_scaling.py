"""Measure whether a serve preview's cost is independent of the size of the model's weights.

Builds two plain model directories that are identical except for the size of their weight files: about
8 MB and about 8 GB, each as 4 safetensors shards with a ``model.safetensors.index.json``. Each shard holds
a valid safetensors header describing one uint8 tensor and is then extended to its full size with
``truncate``, so the files are sparse and take no disk space. Previews of each
(``mlx-agent serve start --path DIR --port P --json``) are timed in interleaved rounds, and the medians and
the ratio big/small are printed. Target: ratio <= 1.3 (a preview binds weights by size, mtime, inode and a
header hash; it must never read them in full). A miss prints FAIL but does not change the exit status;
exit 2 means the set-up or a preview itself went wrong.

Usage (from the repository root): ``python scripts/bench_preview_scaling.py [--rounds N] [--tmpdir DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mlx_agent.supervise.ports import free_port

REPO = Path(__file__).resolve().parent.parent
LAUNCHER = REPO / "scripts" / "mlx-agent"

TARGET_RATIO = 1.3
SHARDS = 4
SMALL_BYTES = 8 * 1000 * 1000
BIG_BYTES = 8 * 1000 * 1000 * 1000
# A sparse file allocates (almost) nothing; more than this means the filesystem wrote real blocks.
MAX_ALLOCATED = 64 * 1024 * 1024


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def write_sparse_shard(path: Path, tensor: str, data_bytes: int) -> None:
    """Write a safetensors file holding one uint8 tensor of ``data_bytes`` bytes, all of it a hole."""
    header = json.dumps(
        {
            "__metadata__": {"format": "mlx"},
            tensor: {"dtype": "U8", "shape": [data_bytes], "data_offsets": [0, data_bytes]},
        },
        separators=(",", ":"),
    ).encode()
    header += b" " * (-len(header) % 8)  # the format pads the header with spaces to 8-byte alignment
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.truncate(8 + len(header) + data_bytes)


def build_model(out_dir: Path, total_bytes: int) -> int:
    """Write a sharded model directory whose weights total ``total_bytes``; return the bytes allocated."""
    out_dir.mkdir(parents=True)
    _write_json(
        out_dir / "config.json",
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 64,
            "num_hidden_layers": SHARDS,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "intermediate_size": 128,
            "vocab_size": 512,
            "rms_norm_eps": 1e-6,
            "torch_dtype": "uint8",
        },
    )
    _write_json(
        out_dir / "tokenizer.json",
        {"version": "1.0", "added_tokens": [], "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}},
    )
    _write_json(out_dir / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "a"})
    per_shard = total_bytes // SHARDS
    weight_map: dict[str, str] = {}
    for i in range(SHARDS):
        name = f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        tensor = f"model.layers.{i}.weight"
        write_sparse_shard(out_dir / name, tensor, per_shard)
        weight_map[tensor] = name
    _write_json(
        out_dir / "model.safetensors.index.json",
        {"metadata": {"total_size": per_shard * SHARDS}, "weight_map": weight_map},
    )
    return sum(p.stat().st_blocks * 512 for p in out_dir.iterdir())


def run_once(argv: list[str], env: dict[str, str]) -> float:
    """Run a command with its output discarded and return its wall time in seconds."""
    started = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"exited {proc.returncode}: {' '.join(argv)}")
    return elapsed


def check_preview(argv: list[str], env: dict[str, str], total_bytes: int) -> str | None:
    """Run one preview and return a problem with it, or None if its plan binds every shard at full size."""
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    try:
        doc = json.loads(proc.stdout)
        files = doc["data"]["plan"]["models"][0]["source"]["files"]
    except (ValueError, KeyError, TypeError):
        return f"exit {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    shards = [f for f in files if f["name"].endswith(".safetensors")]
    size = sum(int(f["size"]) for f in shards)
    if len(shards) != SHARDS or size < total_bytes - SHARDS:
        return f"the plan lists {len(shards)} shards of {size} bytes, expected {SHARDS} of ~{total_bytes}"
    if not all("header_sha256" in f for f in shards):
        return "the plan does not bind the shards by their header hash"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per model (default 15)")
    parser.add_argument("--tmpdir", help="where to build the models (a filesystem with sparse files)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="mlx-agent-scaling-", dir=args.tmpdir))
    try:
        small, big = tmp / "small", tmp / "big"
        allocated = {"small": build_model(small, SMALL_BYTES), "big": build_model(big, BIG_BYTES)}
        if allocated["big"] > MAX_ALLOCATED:
            print(
                f"setup error: {tmp} does not keep sparse files sparse "
                f"({allocated['big']} bytes allocated); pass --tmpdir on another filesystem",
                file=sys.stderr,
            )
            return 2
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
        env["MLX_AGENT_HOME"] = str(tmp / "home")
        port = free_port()
        argv = {
            name: [sys.executable, str(LAUNCHER), "serve", "start", "--path", str(path), "--port", str(port), "--json"]
            for name, path in (("small", small), ("big", big))
        }
        totals = {"small": SMALL_BYTES, "big": BIG_BYTES}
        for name in ("small", "big"):
            problem = check_preview(argv[name], env, totals[name])
            if problem:
                print(f"setup error: the {name} preview is wrong: {problem}", file=sys.stderr)
                return 2

        print(f"python: {sys.executable} ({sys.version.split()[0]})")
        for name in ("small", "big"):
            print(
                f"{name} model: {SHARDS} shards, {totals[name] / 1e6:,.0f} MB of weights, "
                f"{allocated[name] / 1e6:.2f} MB allocated on disk"
            )
        print(f"rounds: {args.rounds} interleaved (after one warm-up round); target ratio big/small <= {TARGET_RATIO}")

        for name in ("small", "big"):  # warm-up
            run_once(argv[name], env)
        samples: dict[str, list[float]] = {"small": [], "big": []}
        for r in range(args.rounds):
            order = ("small", "big") if r % 2 == 0 else ("big", "small")
            for name in order:
                samples[name].append(run_once(argv[name], env))

        print(f"\n{'preview':<10} {'median ms':>10} {'min ms':>8} {'max ms':>8}")
        for name in ("small", "big"):
            values = samples[name]
            print(
                f"{name:<10} {statistics.median(values) * 1000:10.1f} {min(values) * 1000:8.1f} "
                f"{max(values) * 1000:8.1f}"
            )
        ratio = statistics.median(samples["big"]) / statistics.median(samples["small"])
        verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
        print(f"\nratio big/small (medians): {ratio:.3f}  {verdict} (target <= {TARGET_RATIO})")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
