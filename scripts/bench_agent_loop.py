"""Measure how much of an agent loop's prompt the worker's cache serves, turn by turn, on each API.

A 10-turn conversation shaped like Claude Code's (a long system prompt whose first block is the billing header
with a fresh nonce every turn, tools, a growing history of answers and tool results) goes through an eager
front over the wrapped worker on a tiny random-weight model (built locally, or ``--model DIR``), three ways:
``/v1/messages``, ``/v1/responses`` and ``/v1/chat/completions``. For each turn it prints the prompt tokens
and the tokens read from the cache; from turn 2 on the cache should serve at least 90% of the previous turn's
prompt (target), which only holds if nothing that changes per turn reaches the template before the history.

Usage (from the repository root): ``python scripts/bench_agent_loop.py [--turns N] [--model DIR]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.gateway_support import Gateway  # noqa: E402  (after the checkout is on sys.path)

sys.path.insert(0, str(REPO / "scripts"))
from bench_gateway import front  # noqa: E402

TARGET = 0.90
SYSTEM = (
    "You are an agent that works in a repository: read files, run commands, and make careful edits. "
    "Prefer small changes, explain what you did, and never guess a file's content. "
) * 6
TOOLS = [
    {
        "name": name,
        "description": f"The {name} tool.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    for name in ("Read", "Edit", "Bash", "Grep")
]
Turn = Callable[[Gateway, str, int, list[dict[str, Any]]], tuple[int, int, str]]


def post(gateway: Gateway, path: str, body: dict[str, Any]) -> Any:
    reply = gateway.request("POST", path, body, {"anthropic-version": "2023-06-01"})
    if reply.status != 200:
        raise RuntimeError(f"POST {path}: {reply.status} {reply.body[:300]!r}")
    return reply.json()


def messages_turn(gateway: Gateway, system: str, turn: int, history: list[dict[str, Any]]) -> tuple[int, int, str]:
    """One turn through /v1/messages; return (prompt tokens, cached tokens, answer text)."""
    blocks = [
        {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.332; cch={turn:08x};"},
        {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}},
    ]
    doc = post(
        gateway,
        "/v1/messages",
        {
            "model": "org/tiny",
            "max_tokens": 12,
            "system": blocks,
            "tools": TOOLS,
            "messages": history,
            "temperature": 0,
        },
    )
    usage = doc["usage"]
    text = "".join(b.get("text", "") for b in doc["content"] if b["type"] == "text")
    return usage["input_tokens"] + usage["cache_read_input_tokens"], usage["cache_read_input_tokens"], text


def responses_turn(gateway: Gateway, system: str, turn: int, history: list[dict[str, Any]]) -> tuple[int, int, str]:
    """One turn through /v1/responses; return (prompt tokens, cached tokens, answer text)."""
    tools = [
        {"type": "function", "name": t["name"], "description": t["description"], "parameters": t["input_schema"]}
        for t in TOOLS
    ]
    doc = post(
        gateway,
        "/v1/responses",
        {
            "model": "org/tiny",
            "instructions": system,
            "input": history,
            "tools": tools,
            "max_output_tokens": 12,
            "temperature": 0,
            "store": False,
        },
    )
    usage = doc["usage"]
    text = "".join(p["text"] for item in doc["output"] if item["type"] == "message" for p in item["content"])
    return usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"], text


def chat_turn(gateway: Gateway, system: str, turn: int, history: list[dict[str, Any]]) -> tuple[int, int, str]:
    """One turn through /v1/chat/completions; return (prompt tokens, cached tokens, answer text)."""
    tools = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
        }
        for t in TOOLS
    ]
    doc = post(
        gateway,
        "/v1/chat/completions",
        {
            "model": "org/tiny",
            "max_tokens": 12,
            "temperature": 0,
            "messages": [{"role": "system", "content": system}, *history],
            "tools": tools,
        },
    )
    usage = doc["usage"]
    text = doc["choices"][0]["message"].get("content") or ""
    return usage["prompt_tokens"], (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0), text


def run(gateway: Gateway, name: str, turn: Turn, turns: int) -> bool:
    """Run the conversation through one API; print each turn; return whether the target held."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Look at the repository and tell me what it does."}]
    previous = 0
    ok = True
    print(f"{name}:")
    for number in range(1, turns + 1):
        prompt, cached, text = turn(gateway, f"Conversation on {name}. {SYSTEM}", number, history)
        share = cached / previous if previous else None
        held = share is None or share >= TARGET
        ok = ok and held
        note = "" if share is None else f"  {share:.0%} of turn {number - 1}'s prompt  {'PASS' if held else 'FAIL'}"
        print(f"  turn {number:2d}: prompt {prompt:5d} tokens, cached {cached:5d}{note}")
        previous = prompt
        history += [
            {"role": "assistant", "content": text or "(no text)"},
            {"role": "user", "content": f"Step {number}: the file listing shows {number} more modules."},
        ]
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--model", type=Path, help="a local MLX model directory (default: build a tiny one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-agent-loop-") as tmp:
        directory = Path(tmp)
        model = args.model
        if model is None:
            from tests.fixtures.tiny_model import build_tiny_model

            model = build_tiny_model(directory / "tiny-llama")
        gateway = front(directory / "front", model.resolve(), 64, eager=True)
        try:
            results = {
                name: run(gateway, name, turn, args.turns)
                for name, turn in (
                    ("/v1/messages", messages_turn),
                    ("/v1/responses", responses_turn),
                    ("/v1/chat/completions", chat_turn),
                )
            }
        finally:
            gateway.stop()
    print(json.dumps({name: "PASS" if ok else "FAIL" for name, ok in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
