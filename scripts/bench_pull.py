"""Time ``mlx-agent pull --confirm`` against huggingface_hub's own ``hf_hub_download`` of the same weights.

In one run, a stand-in Hub on loopback (tests/hub_standin.py) serves a repo of the tiny model's config and
tokenizer files plus one ``model.safetensors`` of ``--mib`` MiB of random bytes. In interleaved rounds, each a
fresh process with an empty cache, this times:

* ``hf_hub_download(repo, "model.safetensors", revision=COMMIT)``   (the baseline: no hash is checked)
* ``mlx-agent pull REPO --confirm --preview-hash H --json``           (every file, each checked by sha256 / sha1)

and prints both medians and the median of the per-round ratios (pull / baseline) with their min and max. The
preview is run once per round before the confirm and not timed. Wall times on a shared machine are noisy: read
the ratio, measured side by side.

Usage (from the repository root): ``python scripts/bench_pull.py [--rounds N] [--mib N]``
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
BASELINE = "import sys; from huggingface_hub import hf_hub_download as get; get(*sys.argv[1:3], revision=sys.argv[3])"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Return one run's wall time and its stdout, failing loudly on a non-zero exit."""
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv} exited {proc.returncode}: {proc.stdout[-1000:]} {proc.stderr[-2000:]}")
    return elapsed, proc.stdout


def main() -> int:
    from tests.fixtures.tiny_model import build_tiny_model
    from tests.hub_standin import Hub, model_files, serve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pull-") as tmp, serve(Hub()) as hub:
        files = {**model_files(build_tiny_model(Path(tmp) / "tiny")), "model.safetensors": os.urandom(args.mib << 20)}
        files.pop("model.safetensors.index.json", None)
        commit = hub.publish("bench/big", files)
        pulls, bases, ratios = [], [], []
        for index in range(args.rounds):
            env = {
                **os.environ,
                "HF_ENDPOINT": hub.url,
                "HF_HOME": f"{tmp}/hf-{index}",
                "MLX_AGENT_HOME": f"{tmp}/home-{index}",
                "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            }
            env.pop("HF_HUB_OFFLINE", None)
            os.makedirs(env["MLX_AGENT_HOME"], mode=0o700)
            base, _ = timed([sys.executable, "-c", BASELINE, "bench/big", "model.safetensors", commit], env)
            env["HF_HOME"] = f"{tmp}/hf-pull-{index}"
            _, out = timed([sys.executable, str(LAUNCHER), "pull", "bench/big", "--json"], env)
            preview_hash = json.loads(out)["data"]["plan"]["preview_hash"]
            confirm = [sys.executable, str(LAUNCHER), "pull", "bench/big", "--confirm", "--preview-hash", preview_hash]
            pulled, _ = timed([*confirm, "--json"], env)
            pulls.append(pulled)
            bases.append(base)
            ratios.append(pulled / base)
            print(f"round {index + 1}: pull {pulled:.2f} s, hf_hub_download {base:.2f} s, ratio {pulled / base:.2f}")
    print(
        f"{args.mib} MiB weights: pull --confirm median {statistics.median(pulls):.2f} s, hf_hub_download median "
        f"{statistics.median(bases):.2f} s; ratio median {statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
