"""Measure what a fleet costs: routing in a two-model front, and switching models, side by side in one run.

It builds two tiny random-weight models (llama and qwen2; or ``--llama DIR --qwen DIR``), starts fronts with
the real CLI (preview, confirm) over real wrapped workers, and measures:

* routing: non-streaming chat latency (1 token) through an eager two-model front (requests name its first
  model by an alias, so the name and alias tables are both read) vs an eager one-model front of the same
  model, interleaved; added = p50(two) - p50(one)                                   target <= 0.3 ms
* switching: time to the first streamed token of a request for B while A is loaded and must be evicted
  (a JIT front with ``--max-loaded 1``), vs the cold start of B alone (a one-model JIT front, unloaded
  before each round), interleaved; ratio of the medians                            target <= 1.15

and prints each figure with PASS/FAIL. Wall times on a shared machine are noisy, so a miss does not change
the exit status; the run exits 1 only if something breaks.

Usage (from the repository root): ``python scripts/bench_fleet.py [--rounds N] [--switch-rounds N]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.conftest import Agent, free_port  # noqa: E402  (after the checkout is on sys.path)

ROUTING_TARGET_MS = 0.3
SWITCH_TARGET_RATIO = 1.15
HI = [{"role": "user", "content": "Say hi"}]


def fleet_file(directory: Path, models: list[tuple[str, Path, list[str]]]) -> Path:
    """Write a models file of (name, path, aliases) tables."""
    text = "".join(
        f'[[model]]\nname = "{name}"\npath = "{path}"\naliases = {json.dumps(aliases)}\nmax_tokens = 16\n\n'
        for name, path, aliases in models
    )
    path = directory / f"models-{len(models)}-{models[0][0]}.toml"
    path.write_text(text)
    return path


def launch(agent: Agent, models_file: Path, *options: str) -> tuple[int, dict[str, Any]]:
    """Preview and confirm a fleet; return its port and receipt."""
    port = free_port()
    receipt = agent.launch("--models", str(models_file), "--port", str(port), *options)
    return port, receipt


def post(port: int, body: dict[str, Any], *, first_token: bool = False) -> float:
    """Send one chat request; return the seconds to its whole answer, or to its first streamed token."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    start = time.perf_counter()
    try:
        conn.request(
            "POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{resp.status}: {resp.read()[:300]!r}")
        if first_token:
            while not resp.readline().startswith(b"data: {"):
                pass
            elapsed = time.perf_counter() - start
            resp.read()  # read to the end, as a client does: the stream is open work until it ends
            return elapsed
        resp.read()
        return time.perf_counter() - start
    finally:
        conn.close()


def unload(receipt: dict[str, Any]) -> None:
    """Unload every model of a front through its control endpoint."""
    token = Path(receipt["plan"]["front"]["token_path"]).read_text().strip()
    conn = http.client.HTTPConnection("127.0.0.1", receipt["port"], timeout=60)
    try:
        conn.request("POST", "/mlx-agent/unload", body="{}", headers={"Authorization": f"Bearer {token}"})
        if conn.getresponse().status != 200:
            raise RuntimeError("unload refused")
    finally:
        conn.close()


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300, help="non-streaming requests per front")
    parser.add_argument("--switch-rounds", type=int, default=6, help="switches and cold starts each")
    parser.add_argument("--llama", type=Path, help="model A (default: build a tiny llama)")
    parser.add_argument("--qwen", type=Path, help="model B (default: build a tiny qwen2)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        directory = Path(tmp)
        from tests.fixtures.tiny_model import build_tiny_model

        a = (args.llama or build_tiny_model(directory / "tiny-llama")).resolve()
        b = (args.qwen or build_tiny_model(directory / "tiny-qwen2", model_type="qwen2")).resolve()
        home = directory / "home"
        home.mkdir()
        agent = Agent(home, {**os.environ, "MLX_AGENT_HOME": str(home)})
        try:
            two, _ = launch(agent, fleet_file(directory, [("a", a, ["gpt-*"]), ("b", b, ["claude-*"])]))
            one, _ = launch(agent, fleet_file(directory, [("a", a, ["gpt-*"])]))
            body = {"model": "gpt-4o", "messages": HI, "max_tokens": 1, "temperature": 0}
            for _ in range(20):
                post(two, body)
                post(one, body)
            on_two: list[float] = []
            on_one: list[float] = []
            for i in range(args.rounds):
                pair = [(on_two, two), (on_one, one)]
                for sink, port in pair if i % 2 == 0 else pair[::-1]:
                    sink.append(post(port, body))
            p50_two, p50_one = statistics.median(on_two) * 1e3, statistics.median(on_one) * 1e3

            switching, switch_receipt = launch(
                agent, fleet_file(directory, [("a", a, []), ("b", b, [])]), "--jit", "--max-loaded", "1"
            )
            alone, alone_receipt = launch(agent, fleet_file(directory, [("b", b, [])]), "--jit")
            stream_b = {"model": "b", "messages": HI, "max_tokens": 2, "stream": True}
            stream_a = {**stream_b, "model": "a"}
            switches: list[float] = []
            colds: list[float] = []
            post(switching, stream_a, first_token=True)
            for _ in range(args.switch_rounds):
                switches.append(post(switching, stream_b, first_token=True))  # evicts a, loads b
                post(switching, stream_a, first_token=True)  # evicts b again for the next round
                unload(alone_receipt)
                colds.append(post(alone, stream_b, first_token=True))
            if switch_receipt["plan"]["front"]["max_loaded"] != 1:
                raise RuntimeError("the switching front is not limited to one model")
        finally:
            for receipt in (home / "receipts" / "serve").glob("*.json"):
                agent.run("serve", "stop", "--port", receipt.stem)

    added = p50_two - p50_one
    switch, cold = statistics.median(switches), statistics.median(colds)
    print(f"models: A {a.name}, B {b.name}; {args.rounds} routed requests per front, {args.switch_rounds} switches")
    print(
        f"non-streaming p50: one-model front {p50_one:.2f} ms, two-model front {p50_two:.2f} ms, added "
        f"{added:.2f} ms  target <= {ROUTING_TARGET_MS} ms  {verdict(added <= ROUTING_TARGET_MS)}"
    )
    print(
        f"first token of B: switching from A (evict + load) {switch:.3f} s, cold start of B alone {cold:.3f} s, "
        f"ratio {switch / cold:.3f}  target <= {SWITCH_TARGET_RATIO}  {verdict(switch / cold <= SWITCH_TARGET_RATIO)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
