"""Measure what the Anthropic Messages and OpenAI Responses translation costs, side by side in one run.

It starts ``python -m mlx_agent.gateway`` over the wrapped mlx_lm.server on a tiny random-weight model
(built locally, or ``--model DIR``; the eager front's set-up is ``bench_gateway``'s), then streams the same greedy
prompt through the same gateway three ways, in interleaved rounds (the order rotates each round):

* ``/v1/chat/completions`` (the worker's own format, passed through): completion tokens from the usage chunk
  over the time to ``data: [DONE]``;
* ``/v1/messages``: ``output_tokens`` of ``message_delta`` over the time to ``message_stop``;
* ``/v1/responses``: ``output_tokens`` of the final response over the time to ``response.completed`` (or
  ``response.incomplete``).

It prints the median tokens/s of each and the ratios to chat completions with PASS/FAIL (target >= 0.95).
Wall times on a shared machine are noisy, so a miss does not change the exit status; the run exits 1 only if
something breaks.

Usage (from the repository root): ``python scripts/bench_gateway_apis.py [--rounds N] [--tokens N]
[--model DIR]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gateway  # the sibling script that starts the gateway (E402 is not selected)

TARGET_RATIO = 0.95
PROMPT = "Tell a long story"
Reader = Callable[[str, Any], tuple[bool, int | None]]  # (event name, data) -> (finished, tokens if known)


def chat_event(name: str, data: Any) -> tuple[bool, int | None]:
    if data == "[DONE]":
        return True, None
    usage = data.get("usage") if isinstance(data, dict) else None
    return False, usage["completion_tokens"] if usage else None


def messages_event(name: str, data: Any) -> tuple[bool, int | None]:
    if name == "message_delta":
        return False, int(data["usage"]["output_tokens"])
    return name in ("message_stop", "error"), None


def responses_event(name: str, data: Any) -> tuple[bool, int | None]:
    if name in ("response.completed", "response.incomplete"):
        return True, int(data["response"]["usage"]["output_tokens"])
    return name == "response.failed", None


def timed_stream(port: int, path: str, body: dict[str, Any], reader: Reader) -> tuple[int, float]:
    """Return (output tokens, seconds to the stream's last event) for one streamed request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    start = time.perf_counter()
    tokens: int | None = None
    name = ""
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"POST {path}: {resp.status} {resp.read()[:300]!r}")
        while True:
            line = resp.readline()
            if not line:
                raise RuntimeError(f"the {path} stream ended early")
            if line.startswith(b"event: "):
                name = line[7:].strip().decode()
            elif line.startswith(b"data: "):
                payload = line[6:].strip()
                finished, seen = reader(name, "[DONE]" if payload == b"[DONE]" else json.loads(payload))
                tokens = seen if seen is not None else tokens
                if finished:
                    break
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    if tokens is None:
        raise RuntimeError(f"the {path} stream reported no token count")
    return tokens, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="streamed requests per API")
    parser.add_argument("--tokens", type=int, default=256, help="max tokens of each streamed request")
    parser.add_argument("--model", type=Path, help="a local MLX model directory (default: build a tiny one)")
    args = parser.parse_args()

    sides: dict[str, tuple[str, dict[str, Any], Reader]] = {
        "chat completions": (
            "/v1/chat/completions",
            {
                "model": "org/tiny",
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": args.tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            chat_event,
        ),
        "messages": (
            "/v1/messages",
            {
                "model": "org/tiny",
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": args.tokens,
                "temperature": 0,
                "stream": True,
            },
            messages_event,
        ),
        "responses": (
            "/v1/responses",
            {
                "model": "org/tiny",
                "input": PROMPT,
                "max_output_tokens": args.tokens,
                "temperature": 0,
                "stream": True,
                "store": False,
            },
            responses_event,
        ),
    }
    rates: dict[str, list[float]] = {name: [] for name in sides}
    tokens_seen: set[int] = set()
    with tempfile.TemporaryDirectory(prefix="bench-gateway-apis-") as tmp:
        directory = Path(tmp)
        model = args.model
        if model is None:
            from tests.fixtures.tiny_model import build_tiny_model

            model = build_tiny_model(directory / "tiny-llama")
        gateway = bench_gateway.front(directory, model.resolve(), args.tokens, eager=True)
        port = gateway.port
        try:
            names = list(sides)
            for name in names:  # the cold load, then one warm-up per API
                path, body, reader = sides[name]
                timed_stream(port, path, body, reader)
            for i in range(args.rounds):
                order = names[i % len(names) :] + names[: i % len(names)]
                for name in order:
                    path, body, reader = sides[name]
                    tokens, seconds = timed_stream(port, path, body, reader)
                    tokens_seen.add(tokens)
                    rates[name].append(tokens / seconds)
        finally:
            gateway.stop()

    medians = {name: statistics.median(values) for name, values in rates.items()}
    base = medians["chat completions"]
    print(
        f"model: {model.name}; {args.rounds} interleaved streamed rounds per API of {sorted(tokens_seen)} "
        "output tokens, greedy, one gateway"
    )
    print(
        f"streamed tokens/s (median): chat completions {base:.1f}, messages {medians['messages']:.1f}, "
        f"responses {medians['responses']:.1f}"
    )
    for name in ("messages", "responses"):
        ratio = medians[name] / base
        print(
            f"{name} / chat completions: {ratio:.3f}  target >= {TARGET_RATIO}  "
            f"{bench_gateway.verdict(ratio >= TARGET_RATIO)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
