"""Measure --prompt-lookup against native decoding through the real wrapped server, side by side in one run.

The model is a tiny Qwen2 trained here to repeat the passages of its corpus when asked to
(``tests/fixtures/copy_model.py``; about three minutes on two CPU cores the first time, then cached under
``.cache/copy-model-<hash>`` keyed by the generator's source). Two wrapped servers serve it, one plain (native
batching) and one with ``--mlx-agent-prompt-lookup``. Each round sends every prompt to both, back to back, the
order alternating, greedy and streamed; decode tokens/s is measured from a reply's first streamed token to its
end (the prompt's prefill is left out). Two kinds of prompt:

* code edits: a code block of the corpus in the prompt ("Rewrite this code:"), and a reply that repeats it;
* chat: questions whose answers (corpus lines) are not in the prompt.

It prints, per kind, both throughputs, their ratio, and the share of replies identical to native (text, finish
reason and token count; also checked once without streaming); and the lookup server's draft acceptance (from
its log). Targets: code-edit ratio >= 2.0, chat ratio >= 0.90 (a slowdown of at most 10%), 100% identical.

Usage (from the repository root): ``python scripts/bench_prompt_lookup.py [--rounds N] [--max-tokens N]``
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mlx_agent.wire import PROMPT_LOOKUP_FLAG as LOOKUP_FLAG  # noqa: E402
from tests.e2e.test_wrapped_support import running  # noqa: E402
from tests.fixtures import copy_model  # noqa: E402

CACHE = REPO / ".cache"

CODE_TARGET, CHAT_TARGET = 2.0, 0.90
LINE = re.compile(r"(chatcmpl-\S+) prompt lookup: (\d+) tokens in (\d+) forward passes, (\d+) of (\d+) drafted")
CHAT = [
    "Tell me something about the village.",
    "Describe the weather today.",
    "What do scientists measure?",
    "Why is the sky blue?",
    "What is your favourite breakfast?",
    "How does an agent work?",
]


def build_model() -> Path:
    """Return the cached copy model, training it first if this generator's source has not been built."""
    out = CACHE / f"copy-model-{copy_model.source_hash()[:12]}"
    if (out / "model.safetensors").is_file() and (out / ".complete").is_file():
        return out
    print(f"training the copy model into {out} (once; about three minutes)", file=sys.stderr)
    copy_model.build_copy_model(out, log=lambda line: print(f"  {line}", file=sys.stderr))
    (out / ".complete").write_text("")
    return out


def request(port: int, messages: list[dict[str, str]], max_tokens: int, *, stream: bool) -> dict[str, Any]:
    """Send one greedy chat request; return its text, finish reason, tokens, id and decode time."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    post = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(post, timeout=600) as answer:
        if not stream:
            reply = json.loads(answer.read())
            choice = reply["choices"][0]
            return {
                "text": choice["message"]["content"] or "",
                "finish": choice["finish_reason"],
                "tokens": reply["usage"]["completion_tokens"],
                "id": reply["id"],
            }
        text, finish, tokens, ident = "", None, 0, ""
        first = last = 0.0
        for raw in answer:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            ident = event.get("id", ident)
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            for choice in event.get("choices", []):
                piece = choice.get("delta", {}).get("content") or ""
                if piece and not first:
                    first = time.perf_counter()
                text += piece
                finish = choice.get("finish_reason") or finish
            last = time.perf_counter()
    return {"text": text, "finish": finish, "tokens": tokens, "id": ident, "decode_s": last - first if first else 0.0}


def prompts() -> list[tuple[str, list[dict[str, str]]]]:
    """Return the benchmark's prompts, each with its kind: code edits and chat, alternating."""
    sources = [block for block in copy_model.blocks() if block.count("\n") >= 1]
    edits = [
        ("code_edit", [{"role": "user", "content": f"{copy_model.INSTRUCTIONS[i % 3]}\n{source}"}])
        for i, source in enumerate(sources)
    ]
    chats = [("chat", [{"role": "user", "content": question}]) for question in CHAT]
    mixed: list[tuple[str, list[dict[str, str]]]] = []
    for index in range(max(len(edits), len(chats))):
        mixed += edits[index : index + 1] + chats[index : index + 1]
    return mixed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--model", type=Path, help="serve this model instead of the cached copy model")
    args = parser.parse_args()
    model = args.model or build_model()
    logs = CACHE / "bench-prompt-lookup"
    logs.mkdir(parents=True, exist_ok=True)
    totals: dict[str, dict[str, float]] = {}
    identical: dict[str, list[bool]] = {}
    kinds: dict[str, str] = {}
    with running(model, logs) as native, running(model, logs, LOOKUP_FLAG) as lookup:
        ports = {"native": native.port, "lookup": lookup.port}
        for _, messages in prompts()[:2]:  # warm both up
            for port in ports.values():
                request(port, messages, 16, stream=True)
        for kind, messages in prompts():  # identity without streaming, once per prompt
            whole = {name: request(port, messages, args.max_tokens, stream=False) for name, port in ports.items()}
            identical.setdefault(kind, []).append(
                {k: v for k, v in whole["native"].items() if k != "id"}
                == {k: v for k, v in whole["lookup"].items() if k != "id"}
            )
        for round_ in range(args.rounds):
            for index, (kind, messages) in enumerate(prompts()):
                order = ["native", "lookup"] if (round_ + index) % 2 == 0 else ["lookup", "native"]
                got = {name: request(ports[name], messages, args.max_tokens, stream=True) for name in order}
                kinds[got["lookup"]["id"]] = kind
                identical.setdefault(kind, []).append(
                    all(got["native"][k] == got["lookup"][k] for k in ("text", "finish", "tokens"))
                )
                for name, reply in got.items():
                    entry = totals.setdefault(f"{kind}/{name}", {"tokens": 0.0, "seconds": 0.0})
                    entry["tokens"] += max(reply["tokens"] - 1, 0)
                    entry["seconds"] += reply["decode_s"]
        time.sleep(0.5)
        log = lookup.log()
    drafts: dict[str, list[int]] = {}
    for ident, tokens, passes, accepted, drafted in LINE.findall(log):
        if ident in kinds:
            counts = drafts.setdefault(kinds[ident], [0, 0, 0, 0])
            for i, value in enumerate((tokens, passes, accepted, drafted)):
                counts[i] += int(value)
    verdict = True
    print(f"model: {model} ({args.rounds} rounds, max_tokens {args.max_tokens}, greedy, streamed)")
    for kind, target in (("code_edit", CODE_TARGET), ("chat", CHAT_TARGET)):
        rates = {
            name: totals[f"{kind}/{name}"]["tokens"] / totals[f"{kind}/{name}"]["seconds"]
            for name in ("native", "lookup")
        }
        ratio = rates["lookup"] / rates["native"]
        same = identical[kind]
        tokens, passes, accepted, drafted = drafts.get(kind, [0, 0, 0, 0])
        ok = ratio >= target and all(same)
        verdict = verdict and ok
        print(
            f"{kind:9s}: native {rates['native']:7.1f} tok/s, lookup {rates['lookup']:7.1f} tok/s, "
            f"ratio {ratio:.2f} (target >= {target:.2f}); identical {sum(same)}/{len(same)} "
            f"({100 * sum(same) / len(same):.0f}%); acceptance {accepted}/{drafted} drafted tokens "
            f"({100 * accepted / drafted if drafted else 0:.1f}%), {tokens / passes if passes else 0:.2f} tokens "
            f"per forward pass: {'PASS' if ok else 'FAIL'}"
        )
    total = re.findall(r"server total: (.*)", log)
    print(f"lookup server total: {total[-1] if total else 'no lookup replies'}")
    print("verdict:", "PASS" if verdict else "FAIL")
    return 0 if verdict else 1


if __name__ == "__main__":
    raise SystemExit(main())
