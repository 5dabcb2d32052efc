"""Measure what a long request really adds to a worker's memory, against the front's per-request KV estimate.

A random-weight llama (built here: 8 layers, 8 KV heads of 64, float32, so one token's KV cache is 32 KiB and a
long reply's is tens of MB, well above the noise of the process's memory) is served by the real front and the
real wrapped mlx_lm worker (MLX's CPU backend, where the cache lives in the worker's resident memory). After a
short warm-up request, the worker's resident set is sampled every 10 ms while one non-streamed request fills
the context; its growth (peak less the warm-up baseline) is compared with ``request_memory``'s estimate for the
same request, both with the prompt's real token count and with the front's bound. Prints the figures as JSON.

Usage (from the repository root): ``python scripts/bench_request_memory.py [--max-tokens N] [--rounds N]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from mlx_agent.gateway.models.request_memory import PEAK_FACTOR, kv_bytes, prompt_token_bound, read_kv_shape  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.fixtures.tiny_model import build_tiny_model  # noqa: E402
from tests.gateway_support import gateway_config, real_worker_argv, start_gateway  # noqa: E402


def peak_rss(pid: int, stop: threading.Event, out: list[int]) -> None:
    """Append the largest resident set of ``pid`` seen until ``stop`` is set."""
    proc = psutil.Process(pid)
    peak = 0
    while not stop.is_set():
        peak = max(peak, proc.memory_info().rss)
        time.sleep(0.01)
    out.append(max(peak, proc.memory_info().rss))


def measure(max_tokens: int, rounds: int) -> dict[str, Any]:
    """Serve the model, and return the growth of each long request and the estimates."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        model = build_tiny_model(directory / "model", hidden_size=512, num_layers=8, heads=(8, 8))
        shape = read_kv_shape(model)
        assert shape is not None
        argv = real_worker_argv(model, max_tokens)
        config = gateway_config(directory, free_port(), argv, model_path=model, max_tokens=max_tokens)
        gateway = start_gateway(directory, config)
        runs = []
        try:
            english = " ".join(["the server reads every prompt of the agent before it answers the question"] * 8)
            prompt = gateway.chat(english, max_tokens=1).json()["usage"]["prompt_tokens"]
            text = {"messages": [{"role": "user", "content": english}]}
            prompt_bound = {"prompt_tokens": prompt, "prompt_tokens_bound": prompt_token_bound(text)}
            for index in range(rounds):
                gateway.control("POST", "unload", {})
                assert gateway.chat("warm up", max_tokens=4).status == 200
                pid = gateway.status()["worker"]["pid"]
                baseline = psutil.Process(pid).memory_info().rss
                body = {"model": "org/tiny", "messages": [{"role": "user", "content": f"long {index}"}]}
                stop, peaks = threading.Event(), list[int]()
                sampler = threading.Thread(target=peak_rss, args=(pid, stop, peaks))
                sampler.start()
                reply = gateway.request("POST", "/v1/chat/completions", {**body, "max_tokens": max_tokens}, timeout=900)
                stop.set()
                sampler.join()
                usage = reply.json()["usage"]
                tokens = usage["prompt_tokens"] + usage["completion_tokens"]
                bound = prompt_token_bound({**body, "max_tokens": max_tokens})
                runs.append(
                    {
                        "prompt_tokens": usage["prompt_tokens"],
                        "completion_tokens": usage["completion_tokens"],
                        "growth_bytes": peaks[0] - baseline,
                        "estimate_real_tokens_bytes": kv_bytes(shape, tokens, None),
                        "estimate_bound_bytes": kv_bytes(shape, bound + usage["completion_tokens"], None),
                        "prompt_tokens_bound": bound,
                    }
                )
        finally:
            gateway.stop()
    for run in runs:
        run["growth_over_estimate"] = round(run["growth_bytes"] / run["estimate_real_tokens_bytes"], 3)
        peak = run["estimate_real_tokens_bytes"] * PEAK_FACTOR
        run["growth_over_peak_estimate"] = round(run["growth_bytes"] / peak, 3)
    return {"kv_bytes_per_token": shape.token_bytes(None), "english_prompt": prompt_bound, "runs": runs}


def main() -> None:
    """Parse the arguments, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=1900)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.max_tokens, args.rounds), indent=2))


if __name__ == "__main__":
    main()
