"""Measure the wrapped server's decode speed against bare mlx_lm.server, side by side in one run.

Both servers serve the same random-weight model (built here: wider and deeper than the test model, so that
decoding, not HTTP, dominates), greedy, non-streaming, on the same prompts, in interleaved rounds (each prompt
goes to both, back to back, the order alternating each round). Each reply runs to ``max_tokens`` (the model
never writes EOS). The machine is shared and noisy, so the verdict is the median over those back-to-back
pairs of wrapped/bare tokens/s (target >= 0.95, PASS/FAIL); the totals' ratio is printed too. For
information: the wrapped server's tokens/s with a
``json_object`` response_format (llguidance's mask applied every step) and its disconnect delay: a client
that times out, the tokens generated after the stop, and what that is at the measured rate (target < 1 s).

Usage (from the repository root): ``python scripts/bench_wrapped_server.py [--rounds N] [--max-tokens N]``
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import suppress
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.e2e.wrapped_support import running  # noqa: E402  (the repository root is on the path now)

POLL_SECONDS = 0.1  # mlx_agent.runtime.serving.cancel.POLL_SECONDS (not imported: that would import mlx_lm here)
TINY_MODEL = REPO / "tests" / "fixtures" / "tiny_model.py"
TARGET_RATIO = 0.95
PROMPTS = [
    "Tell me about the weather.",
    "Write a function that adds two numbers.",
    "Summarize the history of the village clock.",
    "What is the capital of France?",
]
STOPPED = re.compile(r"after (\d+) tokens; generation stopped \((\d+) more tokens after the stop\)")


def post(port: int, body: dict[str, Any], timeout: float = 600) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        reply: dict[str, Any] = json.loads(answer.read())
        return reply


def timed(port: int, prompt: str, max_tokens: int, **fields: Any) -> tuple[int, float]:
    started = time.perf_counter()
    reply = post(port, {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, **fields})
    return int(reply["usage"]["completion_tokens"]), time.perf_counter() - started


def cancel_delay(port: int, log: Path, rate: float) -> tuple[int, float]:
    """Abandon a long reply after 2 s; return (tokens after the stop, seconds they took at ``rate``)."""
    seen = len(STOPPED.findall(log.read_text()))
    with suppress(TimeoutError, urllib.error.URLError):
        post(port, {"messages": [{"role": "user", "content": "Go on for ever."}], "max_tokens": 100000}, timeout=2)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = STOPPED.findall(log.read_text())
        if len(found) > seen:
            late = int(found[seen][1])
            return late, late / rate
        time.sleep(0.2)
    raise SystemExit("the wrapped server never logged the stop")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--num-layers", type=int, default=4)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-wrapped-") as tmp:
        model = Path(tmp) / "model"
        subprocess.run(
            [
                sys.executable,
                str(TINY_MODEL),
                str(model),
                "--hidden-size",
                str(args.hidden_size),
                "--num-layers",
                str(args.num_layers),
            ],
            check=True,
            capture_output=True,
            cwd=REPO,
        )
        with running(model, Path(tmp), bare=True) as bare_server, running(model, Path(tmp)) as wrapped_server:
            bare, wrapped, wrapped_log = bare_server.port, wrapped_server.port, wrapped_server.log_path
            for port in (bare, wrapped):  # the bare server loads its model on the first request
                post(port, {"messages": [{"role": "user", "content": "warm up"}], "max_tokens": 8})
            totals: dict[str, list[float]] = {"bare": [0, 0.0], "wrapped": [0, 0.0], "wrapped+json": [0, 0.0]}
            ports = {"bare": bare, "wrapped": wrapped}
            pairs: list[float] = []
            for round_index in range(args.rounds):
                order = ["bare", "wrapped"] if round_index % 2 == 0 else ["wrapped", "bare"]
                for prompt in PROMPTS:
                    pair: dict[str, float] = {}
                    for name in order:
                        tokens, seconds = timed(ports[name], f"{prompt} ({round_index})", args.max_tokens)
                        totals[name][0] += tokens
                        totals[name][1] += seconds
                        pair[name] = tokens / seconds
                    pairs.append(pair["wrapped"] / pair["bare"])
                tokens, seconds = timed(
                    wrapped, f"JSON please ({round_index})", args.max_tokens, response_format={"type": "json_object"}
                )
                totals["wrapped+json"][0] += tokens
                totals["wrapped+json"][1] += seconds
            rate = {name: count / spent for name, (count, spent) in totals.items()}
            late, delay = cancel_delay(wrapped, wrapped_log, rate["wrapped"])

    ratio = statistics.median(pairs)
    print(
        f"model: random llama, hidden {args.hidden_size}, {args.num_layers} layers; {args.rounds} rounds x "
        f"{len(PROMPTS)} prompts, max_tokens {args.max_tokens}, greedy, non-streaming"
    )
    for name in ("bare", "wrapped", "wrapped+json"):
        count, spent = totals[name]
        print(f"  {name:<13} {count:>6.0f} tokens in {spent:7.2f} s = {rate[name]:7.1f} tokens/s")
    print(f"ratio wrapped/bare of the totals: {rate['wrapped'] / rate['bare']:.3f}")
    print(
        f"ratio wrapped/bare, median of {len(pairs)} back-to-back pairs: {ratio:.3f} (target >= {TARGET_RATIO}) "
        f"{'PASS' if ratio >= TARGET_RATIO else 'FAIL'}"
    )
    print(f"json_object / plain (information): {rate['wrapped+json'] / rate['wrapped']:.3f}")
    print(
        f"disconnect: {late} tokens after the stop = {delay:.2f} s at {rate['wrapped']:.0f} tokens/s, plus up to "
        f"{POLL_SECONDS} s to notice (target < 1 s) {'PASS' if delay + POLL_SECONDS < 1.0 else 'FAIL'}"
    )
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
