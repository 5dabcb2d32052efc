"""Measure the prompt cache kept across unloads: the next turn of a long conversation after an unload and reload.

A random-weight model (built here; wider than the test model so that prefill dominates) is served by two JIT
fronts through the real CLI: one keeps its prompt cache on disk (the default), one does not
(``--prompt-cache-disk-gb 0``). Each round uses a fresh conversation whose first turn is about 4,000 tokens
(``--words``), and measures the time to the first streamed token of its second turn three ways:

* warm: the worker that answered the first turn is still loaded (its cache in memory);
* restored: the worker was unloaded after the first turn (saving its cache) and a new one loaded (restoring
  it) before the second turn: ratio restored/warm                                  target <= 1.3
* cold: the same, on the front that keeps nothing, so the new worker prefills it all: ratio cold/restored
  (information).

Each reload is made by a one-token request of its own before the timed turn, so load time is not counted.
Prints medians and PASS/FAIL; a miss does not change the exit status.

Usage (from the repository root): ``python scripts/bench_prompt_cache.py [--rounds N] [--tokens N]``
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, str(REPO / "scripts"))
from bench_fleet import post, unload, verdict  # noqa: E402

from tests.conftest import Agent, free_port  # noqa: E402

TARGET = 1.3


def conversation(round_index: int, words: int) -> list[dict[str, str]]:
    """Return a first turn of about ``words`` tokens, unique to the round (no cache is shared across rounds)."""
    text = f"Round {round_index}. Keep this file in mind: " + " ".join(f"w{round_index}x{i}" for i in range(words))
    return [{"role": "user", "content": text}]


def second_turn(first: list[dict[str, str]]) -> list[dict[str, str]]:
    """Return the conversation's second turn (the reply is fixed text: the timing does not depend on it)."""
    return [*first, {"role": "assistant", "content": "Noted."}, {"role": "user", "content": "Now summarise it."}]


def ask(port: int, messages: list[dict[str, str]], *, stream: bool = False) -> float:
    """Send one greedy turn (one token); return the seconds to its first streamed token or its answer."""
    body: dict[str, Any] = {"messages": messages, "max_tokens": 1, "temperature": 0, "stream": stream}
    return post(port, body, first_token=stream)


def first_turn_tokens(port: int, messages: list[dict[str, str]]) -> int:
    """Send a first turn (one token) and return its prompt tokens."""
    import urllib.request

    body = json.dumps({"messages": messages, "max_tokens": 1, "temperature": 0}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as reply:
        return int(json.loads(reply.read())["usage"]["prompt_tokens"])


def saved(receipt: dict[str, Any]) -> int:
    """Return how many entries the front's model has saved on disk."""
    record = receipt["plan"]["models"][0]["prompt_cache"]
    return len(list(Path(record["dir"]).glob("[!.]*.safetensors"))) if record else 0


def reload(port: int, receipt: dict[str, Any], before: int) -> None:
    """Unload the model, wait for its worker's save (if it keeps one), and load it again with a tiny request."""
    unload(receipt)
    deadline = time.monotonic() + 60
    while receipt["plan"]["models"][0]["prompt_cache"] and saved(receipt) <= before:
        if time.monotonic() > deadline:
            raise RuntimeError("the unloaded worker saved nothing")
        time.sleep(0.05)
    time.sleep(0.3)  # the old worker finishes exiting
    ask(port, [{"role": "user", "content": "ping"}])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--words", type=int, default=680, help="words of the first turn (several tokens each)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-prompt-cache-") as tmp:
        directory = Path(tmp)
        from tests.fixtures.tiny_model import build_tiny_model

        model = build_tiny_model(directory / "model", hidden_size=256, num_layers=4)
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 16384}))
        home = directory / "home"
        home.mkdir()
        agent = Agent(home, {**os.environ, "MLX_AGENT_HOME": str(home)})
        keeping_port, cold_port = free_port(), free_port()
        keeping = agent.launch("--path", str(model), "--port", str(keeping_port), "--jit")
        cold = agent.launch("--path", str(model), "--port", str(cold_port), "--jit", "--prompt-cache-disk-gb", "0")
        times: dict[str, list[float]] = {"warm": [], "restored": [], "cold": []}
        prompt_tokens = 0
        try:
            for r in range(args.rounds):
                warm_first = conversation(3 * r, args.words)
                prompt_tokens = first_turn_tokens(keeping_port, warm_first)
                times["warm"].append(ask(keeping_port, second_turn(warm_first), stream=True))
                restored_first = conversation(3 * r + 1, args.words)
                ask(keeping_port, restored_first)
                reload(keeping_port, keeping, saved(keeping))
                times["restored"].append(ask(keeping_port, second_turn(restored_first), stream=True))
                cold_first = conversation(3 * r + 2, args.words)
                ask(cold_port, cold_first)
                reload(cold_port, cold, 0)
                times["cold"].append(ask(cold_port, second_turn(cold_first), stream=True))
            status = agent.run("serve", "status").data["servers"]
            kept = next(s for s in status if s["port"] == keeping_port)["models"][0]["prompt_cache"]
        finally:
            for port in (keeping_port, cold_port):
                agent.run("serve", "stop", "--port", str(port))
    warm, restored, cold_s = (statistics.median(times[k]) for k in ("warm", "restored", "cold"))
    print(
        f"model: random llama, hidden 256, 4 layers; {args.rounds} rounds; first turn {prompt_tokens} prompt "
        "tokens; time to the first token of the second turn, medians (each round's in brackets)"
    )
    for name, label in (
        ("warm", "warm (cache in memory)"),
        ("restored", "restored (unload, reload)"),
        ("cold", "cold (nothing kept)"),
    ):
        rounds = ", ".join(f"{t * 1e3:.0f}" for t in times[name])
        print(f"  {label:<28} {statistics.median(times[name]) * 1e3:8.1f} ms  ({rounds})")
    size, limit = kept["bytes"] / 1e6, kept["disk_gb"]
    print(f"saved on disk: {kept['entries']} entries, {size:.1f} MB (limit {limit:.0f} GB)")
    print(f"ratio restored/warm = {restored / warm:.3f}  target <= {TARGET}  {verdict(restored / warm <= TARGET)}")
    print(f"ratio cold/restored = {cold_s / restored:.3f}  (information: what the saved cache spares)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
