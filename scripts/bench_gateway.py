"""Measure what a server's front costs in front of its real worker, side by side in one run.

It starts ``python -m mlx_agent.gateway`` over the wrapped mlx_lm.server (on its private Unix socket) on a tiny
random-weight model (built locally, or ``--model DIR``), and measures:

* a JIT front's RSS while unloaded (after answering /health and /v1/models)    target <= 80 MB
* with an eager front (the model loaded at start, as every plain ``serve start`` runs):
  non-streaming chat latency, 1 token, front vs the same worker called directly on its socket
  (interleaved rounds; added = p50(front) - p50(direct))                         target <= 1 ms
* streamed tokens/s, front vs direct (interleaved; median of each; completion tokens from the usage chunk
  over the time to ``data: [DONE]``)                                             target ratio >= 0.98

and prints each figure with PASS/FAIL. Wall times on a shared machine are noisy, so a miss does not change
the exit status; the run exits 1 only if something breaks.

Usage (from the repository root): ``python scripts/bench_gateway.py [--rounds N] [--stream-rounds N]
[--stream-tokens N] [--model DIR]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import free_port  # noqa: E402  (after the checkout is on sys.path)
from tests.fixtures.group import UnixHTTPConnection  # noqa: E402
from tests.gateway_support import Gateway, gateway_config, real_worker_argv, start_gateway  # noqa: E402

LATENCY_TARGET_MS = 1.0
STREAM_TARGET_RATIO = 0.98
RSS_TARGET_MB = 80.0


Target = int | str  # a front's TCP port, or a worker's socket path


def connection(target: Target) -> http.client.HTTPConnection:
    if isinstance(target, int):
        return http.client.HTTPConnection("127.0.0.1", target, timeout=120)
    return UnixHTTPConnection(target, timeout=120)


def post(target: Target, path: str, body: dict[str, Any]) -> bytes:
    conn = connection(target)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"POST {path}: {resp.status} {data[:300]!r}")
        return data
    finally:
        conn.close()


def timed_chat(target: Target, body: dict[str, Any]) -> float:
    start = time.perf_counter()
    post(target, "/v1/chat/completions", body)
    return time.perf_counter() - start


def timed_stream(target: Target, body: dict[str, Any]) -> tuple[int, float]:
    """Return (completion tokens, seconds to ``data: [DONE]``) for one streamed chat completion."""
    conn = connection(target)
    start = time.perf_counter()
    tokens = 0
    try:
        conn.request(
            "POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        while True:
            line = resp.readline()
            if not line or line.startswith(b"data: [DONE]"):
                break
            if line.startswith(b"data: {") and b'"usage"' in line:
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    tokens = usage["completion_tokens"]
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    return tokens, elapsed


def front(
    directory: Path,
    model: Path,
    tokens: int,
    *,
    eager: bool,
    worker_flags: tuple[str, ...] = (),
    contract: dict[str, Any] | None = None,
) -> Gateway:
    """Start a front over the real wrapped worker (mlx_lm's ``worker_flags``, ``contract`` fields).

    An eager one is returned once loaded.
    """
    policy = {"preload": True, "keep_loaded": True} if eager else {}
    config = gateway_config(
        directory,
        free_port(),
        [*real_worker_argv(model, tokens, **(contract or {})), *worker_flags],
        model_path=model,
        max_tokens=tokens,
        policy=policy,
        mode="eager" if eager else "jit",
    )
    gateway = start_gateway(directory, config)
    deadline = time.monotonic() + 120
    while not json.loads(gateway.request("GET", "/health").body)["ready"]:
        if time.monotonic() > deadline or gateway.proc.poll() is not None:
            raise RuntimeError(gateway.log_path.read_text())
        time.sleep(0.1)
    return gateway


def rss_mb(pid: int) -> float:
    import psutil

    return float(psutil.Process(pid).memory_info().rss) / 1e6


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def interleaved(rounds: int, direct: Target, via: Target, measure: Any) -> tuple[list[Any], list[Any]]:
    """Run ``measure`` on both targets ``rounds`` times, alternating which goes first."""
    on_direct: list[Any] = []
    on_via: list[Any] = []
    for i in range(rounds):
        pair = [(on_direct, direct), (on_via, via)]
        for sink, target in pair if i % 2 == 0 else pair[::-1]:
            sink.append(measure(target))
    return on_direct, on_via


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="non-streaming requests per side")
    parser.add_argument("--stream-rounds", type=int, default=20, help="streamed requests per side")
    parser.add_argument("--stream-tokens", type=int, default=256, help="max_tokens of each streamed request")
    parser.add_argument("--model", type=Path, help="a local MLX model directory (default: build a tiny one)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        directory = Path(tmp)
        model = args.model
        if model is None:
            from tests.fixtures.tiny_model import build_tiny_model

            model = build_tiny_model(directory / "tiny-llama")
        model = model.resolve()
        jit = front(directory / "jit", model, args.stream_tokens, eager=False)
        try:
            for _ in range(20):
                jit.request("GET", "/health")
                jit.request("GET", "/v1/models")
            rss_unloaded = rss_mb(jit.proc.pid)
        finally:
            jit.stop()

        eager = front(directory / "eager", model, args.stream_tokens, eager=True)
        try:
            socket_path = eager.status()["worker"]["address"]
            chat: dict[str, Any] = {
                "messages": [{"role": "user", "content": "Say hi"}],
                "max_tokens": 1,
                "temperature": 0,
            }
            for _ in range(10):  # warm both paths
                timed_chat(socket_path, chat)
                timed_chat(eager.port, chat)
            direct, via = interleaved(args.rounds, socket_path, eager.port, lambda t: timed_chat(t, chat))
            p50_direct, p50_via = statistics.median(direct) * 1e3, statistics.median(via) * 1e3
            paired = statistics.median((b - a) * 1e3 for a, b in zip(direct, via, strict=True))

            stream: dict[str, Any] = {
                "messages": [{"role": "user", "content": "Tell a long story"}],
                "max_tokens": args.stream_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            timed_stream(socket_path, stream)
            timed_stream(eager.port, stream)
            streams_direct, streams_via = interleaved(
                args.stream_rounds, socket_path, eager.port, lambda t: timed_stream(t, stream)
            )
            tokens_seen = {n for n, _ in streams_direct + streams_via}
            tps_direct = statistics.median(n / s for n, s in streams_direct)
            tps_via = statistics.median(n / s for n, s in streams_via)
            ratio = tps_via / tps_direct
        finally:
            eager.stop()

    added = p50_via - p50_direct
    print(
        f"model: {model.name}; {args.rounds} non-streaming rounds, {args.stream_rounds} streamed rounds "
        f"of {sorted(tokens_seen)} completion tokens; direct = the worker on its Unix socket"
    )
    print(
        f"non-streaming p50: direct {p50_direct:.2f} ms, via the eager front {p50_via:.2f} ms, "
        f"added {added:.2f} ms (median paired difference {paired:.2f} ms)  "
        f"target <= {LATENCY_TARGET_MS} ms  {verdict(added <= LATENCY_TARGET_MS)}"
    )
    print(
        f"streamed tokens/s: direct {tps_direct:.1f}, via the eager front {tps_via:.1f}, ratio {ratio:.3f}  "
        f"target >= {STREAM_TARGET_RATIO}  {verdict(ratio >= STREAM_TARGET_RATIO)}"
    )
    print(
        f"JIT front RSS while unloaded: {rss_unloaded:.1f} MB  target <= {RSS_TARGET_MB} MB  "
        f"{verdict(rss_unloaded <= RSS_TARGET_MB)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
