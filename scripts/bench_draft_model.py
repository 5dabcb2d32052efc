"""Measure mlx_lm's speculative decoding with a draft model through the wrapped worker (information only).

Two wrapped workers serve the same random-weight model (built here, wider and deeper than the test model),
one with ``--draft-model`` (a one-layer model of the same tokenizer: random weights, so it proposes few
tokens the model accepts) and one without, greedy, non-streaming, on the same prompts in interleaved rounds.
Prints each worker's tokens/s, their ratio, and whether every reply was the same text (it must be: drafts
are verified by the model). There is no target: the CPU here and random weights say little about a real
draft on a Mac.

Usage (from the repository root): ``python scripts/bench_draft_model.py [--rounds N] [--max-tokens N]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "scripts"))
from bench_wrapped_server import PROMPTS, TINY_MODEL, post  # noqa: E402

from tests.e2e.wrapped_support import running  # noqa: E402


def build(path: Path, *options: str) -> Path:
    """Build a random-weight model at ``path`` with the fixture's options."""
    subprocess.run([sys.executable, str(TINY_MODEL), str(path), *options], check=True, capture_output=True, cwd=REPO)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--num-draft-tokens", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-draft-") as tmp:
        model = build(Path(tmp) / "model", "--hidden-size", "256", "--num-layers", "6")
        draft = build(Path(tmp) / "draft", "--hidden-size", "64", "--num-layers", "1", "--seed", "7")
        speculative = ("--draft-model", str(draft), "--num-draft-tokens", str(args.num_draft_tokens))
        with running(model, Path(tmp)) as plain, running(model, Path(tmp), *speculative) as drafted:
            ports = {"without draft": plain.port, "with draft": drafted.port}
            totals = {name: [0, 0.0] for name in ports}
            texts: dict[str, list[str]] = {name: [] for name in ports}
            for round_index in range(args.rounds):
                order = list(ports) if round_index % 2 == 0 else list(reversed(ports))
                for prompt in PROMPTS:
                    for name in order:
                        body = {
                            "messages": [{"role": "user", "content": f"{prompt} ({round_index})"}],
                            "max_tokens": args.max_tokens,
                            "temperature": 0,
                        }
                        start = time.perf_counter()
                        reply = post(ports[name], body)
                        totals[name][1] += time.perf_counter() - start
                        totals[name][0] += reply["usage"]["completion_tokens"]
                        texts[name].append(reply["choices"][0]["message"]["content"])
    rate = {name: count / spent for name, (count, spent) in totals.items()}
    print(
        f"model: random llama, hidden 256, 6 layers; draft: hidden 64, 1 layer, same tokenizer; {args.rounds} "
        f"rounds x {len(PROMPTS)} prompts, max_tokens {args.max_tokens}, greedy, {args.num_draft_tokens} draft tokens"
    )
    for name, (count, spent) in totals.items():
        print(f"  {name:<14} {count:>6.0f} tokens in {spent:7.2f} s = {rate[name]:7.1f} tokens/s")
    same = texts["with draft"] == texts["without draft"]
    print(f"ratio with/without draft: {rate['with draft'] / rate['without draft']:.3f} (information)")
    print(f"replies identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
