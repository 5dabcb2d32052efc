"""Measure what the JIT gateway costs in front of a real worker, side by side in one run.

It starts ``python -m mlx_agent.gateway`` over the wrapped mlx_lm.server on a tiny random-weight model
(built locally, or ``--model DIR``), then measures:

* the gateway's RSS while unloaded (after answering /health and /v1/models)      target <= 80 MB
* non-streaming chat latency, 1 token, gateway vs the same worker called directly
  (interleaved rounds; added = p50(gateway) - p50(direct))                       target <= 2 ms
* streamed tokens/s, gateway vs direct (interleaved; median of each; completion tokens from the
  usage chunk over the time to ``data: [DONE]``)                                 target ratio >= 0.95

and prints each figure with PASS/FAIL. Wall times on a shared machine are noisy, so a miss does not change
the exit status; the run exits 1 only if something breaks.

Usage (from the repository root): ``python scripts/bench_gateway.py [--rounds N] [--stream-rounds N]
[--stream-tokens N] [--model DIR]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mlx_agent.supervise.ports import free_port  # noqa: E402  (after the checkout is on sys.path)

LATENCY_TARGET_MS = 2.0
STREAM_TARGET_RATIO = 0.95
RSS_TARGET_MB = 80.0
TOKEN = "bench-control-token"


def private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def post(port: int, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(
            "POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})}
        )
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"POST {path} on {port}: {resp.status} {data[:200]!r}")
        return data
    finally:
        conn.close()


def get_json(port: int, path: str, token: str | None = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def timed_chat(port: int, body: dict[str, Any]) -> float:
    start = time.perf_counter()
    post(port, "/v1/chat/completions", body)
    return time.perf_counter() - start


def timed_stream(port: int, body: dict[str, Any]) -> tuple[int, float]:
    """Return (completion tokens, seconds to data: [DONE]) for one streamed chat."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    start = time.perf_counter()
    tokens = 0
    try:
        conn.request(
            "POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        while True:
            line = resp.readline()
            if not line:
                raise RuntimeError("stream ended without [DONE]")
            if line.startswith(b"data: [DONE]"):
                break
            if line.startswith(b"data: {") and b'"usage"' in line:
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    tokens = usage["completion_tokens"]
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    return tokens, elapsed


def start_gateway(directory: Path, model: Path, stream_tokens: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    serve = directory / "serve"
    serve.mkdir()
    argv = [
        sys.executable,
        "-m",
        "mlx_agent.runtime",
        "mlx_lm",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--max-tokens",
        str(stream_tokens),
    ]
    config = {
        "format_version": "1.0",
        "host": "127.0.0.1",
        "port": port,
        "model_id": "bench/tiny",
        "model_path": str(model),
        "max_tokens": stream_tokens,
        "worker": {
            "argv": argv,
            "env": {},
            "cwd": "/",
            "ready_timeout_s": 120,
            "readiness": {"path": "/health", "status": 200, "json": {"status": "ok"}},
            "log_path": str(serve / "worker.log"),
        },
        "weight_bytes": None,
        "policy_path": str(serve / "policy.json"),
        "control_token_path": str(serve / "token"),
    }
    private(serve / "token", TOKEN + "\n")
    private(directory / "gateway.json", json.dumps(config))
    log = open(directory / "gateway.log", "ab")  # noqa: SIM115 - the child writes to it until it stops
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlx_agent.gateway", "--config", str(directory / "gateway.json")],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            if get_json(port, "/health")["status"] == "ok":
                return proc, port
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((directory / "gateway.log").read_text())
        time.sleep(0.05)


def rss_mb(pid: int) -> float:
    import psutil

    return float(psutil.Process(pid).memory_info().rss) / 1e6


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


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
        proc, port = start_gateway(directory, model.resolve(), args.stream_tokens)
        try:
            for _ in range(20):
                get_json(port, "/health")
                get_json(port, "/v1/models")
            rss_unloaded = rss_mb(proc.pid)

            chat: dict[str, Any] = {
                "messages": [{"role": "user", "content": "Say hi"}],
                "max_tokens": 1,
                "temperature": 0,
            }
            post(port, "/v1/chat/completions", chat)  # the cold load
            worker_port = get_json(port, "/mlx-agent/status", TOKEN)["worker"]["port"]
            for _ in range(10):  # warm both paths
                timed_chat(worker_port, chat)
                timed_chat(port, chat)
            direct: list[float] = []
            via: list[float] = []
            for i in range(args.rounds):
                pair = [(direct, worker_port), (via, port)]
                for sink, target in pair if i % 2 == 0 else pair[::-1]:
                    sink.append(timed_chat(target, chat))
            p50_direct, p50_via = statistics.median(direct) * 1e3, statistics.median(via) * 1e3
            paired = statistics.median((b - a) * 1e3 for a, b in zip(direct, via, strict=True))

            stream: dict[str, Any] = {
                "messages": [{"role": "user", "content": "Tell a long story"}],
                "max_tokens": args.stream_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            timed_stream(worker_port, stream)
            timed_stream(port, stream)
            rate_direct: list[float] = []
            rate_via: list[float] = []
            tokens_seen = set()
            for i in range(args.stream_rounds):
                pair = [(rate_direct, worker_port), (rate_via, port)]
                for sink, target in pair if i % 2 == 0 else pair[::-1]:
                    tokens, seconds = timed_stream(target, stream)
                    tokens_seen.add(tokens)
                    sink.append(tokens / seconds)
            tps_direct, tps_via = statistics.median(rate_direct), statistics.median(rate_via)
            ratio = tps_via / tps_direct

            post(port, "/mlx-agent/unload", {}, {"Authorization": f"Bearer {TOKEN}"})
            rss_after = rss_mb(proc.pid)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)

    added = p50_via - p50_direct
    print(
        f"model: {model.name}; {args.rounds} non-streaming rounds, {args.stream_rounds} streamed rounds "
        f"of {sorted(tokens_seen)} completion tokens"
    )
    print(
        f"non-streaming p50: direct {p50_direct:.2f} ms, via gateway {p50_via:.2f} ms, "
        f"added {added:.2f} ms (median paired difference {paired:.2f} ms)  "
        f"target <= {LATENCY_TARGET_MS} ms  {verdict(added <= LATENCY_TARGET_MS)}"
    )
    print(
        f"streamed tokens/s: direct {tps_direct:.1f}, via gateway {tps_via:.1f}, ratio {ratio:.3f}  "
        f"target >= {STREAM_TARGET_RATIO}  {verdict(ratio >= STREAM_TARGET_RATIO)}"
    )
    print(
        f"gateway RSS while unloaded: {rss_unloaded:.1f} MB at start, {rss_after:.1f} MB after load+unload  "
        f"target <= {RSS_TARGET_MB} MB  {verdict(max(rss_unloaded, rss_after) <= RSS_TARGET_MB)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
