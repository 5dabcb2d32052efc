"""Measure --prompt-lookup against native decoding through the real wrapped server, side by side in one run.

The model is a tiny Qwen2 trained here to repeat the passages of its corpus when asked to
(``tests/fixtures/copy_model.py``; about three minutes on two CPU cores the first time, then cached under
``.cache/copy-model-<hash>`` keyed by the generator's source). Two wrapped servers serve it, one plain (native
batching) and one with ``--mlx-agent-prompt-lookup``. Each round sends every prompt to both, back to back, the
order alternating, greedy and streamed; decode time is measured from a reply's first streamed token to its end
(the prompt's prefill is left out). The tokens/s shown count each prompt's fastest round on each server, and the
ratio judged is the median over the back-to-back pairs of native's decode time over lookup's (the replies are
identical, so this is the ratio of rates): a chat reply decodes in tens of milliseconds, where a busy CPU's
scheduling alone moves one reading by half. Two kinds of prompt:

* code edits: a code block of the corpus in the prompt ("Rewrite this code:"), and a reply that repeats it;
* chat: questions whose answers (corpus lines) are not in the prompt.

It prints, per kind, both throughputs, their ratio, and the share of replies identical to native (reasoning,
text, finish reason and token count; also checked once without streaming); and the lookup server's draft
acceptance (from its log). Targets: code-edit ratio >= 2.0, chat ratio >= 0.90 (a slowdown of at most 10%),
100% identical.

Then the same for a thinking-vocabulary copy of that model (``thinking_copy``: ``<think>`` and ``</think>`` added
as special tokens, with a Qwen3-style template), whose replies all have the reply watcher. With thinking off
(``enable_thinking: false``: an empty thinking block in the prompt) the targets are the same; with thinking on
(the template opens the thinking, and the copy model never closes it, so ``reasoning_budget`` does) the replies
must be identical, and the throughputs are shown for information.

Usage (from the repository root): ``python scripts/bench_prompt_lookup.py [--rounds N] [--max-tokens N]``
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.contract_support import LOOKUP  # noqa: E402
from tests.e2e.wrapped_support import running  # noqa: E402
from tests.fixtures import copy_model  # noqa: E402

CACHE = REPO / ".cache"

CODE_TARGET, CHAT_TARGET = 2.0, 0.90
THINKING_BUDGET = 48
# Qwen3-style: the generation prompt opens the thinking, or writes it empty when the request turns it off.
QWEN3_GENERATION = (
    "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and not enable_thinking %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{- '<think>\\n' }}{%- endif %}"
)
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


class Kind(NamedTuple):
    """One kind of prompt on one model: its name, the request fields it adds, and its ratio target (None: shown)."""

    name: str
    prompts: str  # "code_edit" or "chat" (see ``prompts``)
    extra: dict[str, Any]
    target: float | None


PLAIN_KINDS = [Kind("code_edit", "code_edit", {}, CODE_TARGET), Kind("chat", "chat", {}, CHAT_TARGET)]
THINKING_OFF: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}
THINKING_ON: dict[str, Any] = {"reasoning_budget": THINKING_BUDGET}
THINKING_KINDS = [
    Kind("code_edit", "code_edit", THINKING_OFF, CODE_TARGET),
    Kind("chat", "chat", THINKING_OFF, CHAT_TARGET),
    Kind("code_edit+think", "code_edit", THINKING_ON, None),
    Kind("chat+think", "chat", THINKING_ON, None),
]


def thinking_copy(model: Path) -> Path:
    """Return a copy of ``model`` with ``<think>``/``</think>`` special tokens and a Qwen3-style template.

    The new embedding rows are small random numbers and the new output rows zero, so the model never writes
    either marker itself; mlx_lm then knows the markers, and every reply is watched.
    """
    import mlx.core as mx
    from tokenizers import AddedToken, Tokenizer

    from tests.fixtures.tiny_model import save_weights

    out = model.with_name(f"{model.name}-thinking")
    if (out / ".complete").is_file():
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(model, out)
    markers = ["<think>", "</think>"]
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in markers])
    tokenizer.save(str(out / "tokenizer.json"))
    config = json.loads((out / "tokenizer_config.json").read_text())
    for marker in markers:
        config["added_tokens_decoder"][str(tokenizer.token_to_id(marker))] = {
            "content": marker,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
    template = config["chat_template"]
    generation = "{{- '<|im_start|>assistant\\n' }}"
    assert template.count(generation) == 1, "the copy model's template changed"
    config["chat_template"] = template.replace(generation, QWEN3_GENERATION)
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    weights: Any = mx.load(str(out / "model.safetensors"))
    rows, hidden = weights["model.embed_tokens.weight"].shape
    width = tokenizer.get_vocab_size()
    mx.random.seed(0)
    weights["model.embed_tokens.weight"] = mx.concatenate(
        [weights["model.embed_tokens.weight"], 0.02 * mx.random.normal((width - rows, hidden))]
    )
    weights["lm_head.weight"] = mx.concatenate([weights["lm_head.weight"], mx.zeros((width - rows, hidden))])
    save_weights(out, weights)
    model_config = json.loads((out / "config.json").read_text())
    model_config["vocab_size"] = width
    (out / "config.json").write_text(json.dumps(model_config, indent=2))
    (out / ".complete").write_text("")
    return out


def request(
    port: int, messages: list[dict[str, str]], max_tokens: int, extra: dict[str, Any], *, stream: bool
) -> dict[str, Any]:
    """Send one greedy chat request; return its reasoning, text, finish reason, tokens, id and decode time."""
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "stream": stream, **extra}
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
                "reasoning": choice["message"].get("reasoning") or "",
                "text": choice["message"]["content"] or "",
                "finish": choice["finish_reason"],
                "tokens": reply["usage"]["completion_tokens"],
                "id": reply["id"],
            }
        reasoning, text, finish, tokens, ident = "", "", None, 0, ""
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
                delta = choice.get("delta", {})
                thought, piece = delta.get("reasoning") or "", delta.get("content") or ""
                if (thought or piece) and not first:
                    first = time.perf_counter()
                reasoning += thought
                text += piece
                finish = choice.get("finish_reason") or finish
            last = time.perf_counter()
    decode_s = last - first if first else 0.0
    return {"reasoning": reasoning, "text": text, "finish": finish, "tokens": tokens, "id": ident, "decode_s": decode_s}


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


def measure(model: Path, kinds: list[Kind], rounds: int, max_tokens: int, logs: Path) -> bool:
    """Serve ``model`` natively and with lookup side by side, print one line per kind; return whether all pass."""
    best: dict[tuple[str, int, str], tuple[int, float]] = {}  # (kind, prompt, server): tokens, fastest decode
    pairs: dict[str, list[float]] = {}  # per kind: lookup's decode rate over native's, one per back-to-back pair
    identical: dict[str, list[bool]] = {}
    names: dict[str, str] = {}
    # Each prompt with every kind that uses it: code edits and chat stay interleaved.
    work = [(kind, messages) for name, messages in prompts() for kind in kinds if kind.prompts == name]
    same = ("reasoning", "text", "finish", "tokens")
    with running(model, logs) as native, running(model, logs, *LOOKUP) as lookup:
        ports = {"native": native.port, "lookup": lookup.port}
        for kind, messages in work[:2]:  # warm both up
            for port in ports.values():
                request(port, messages, 16, kind.extra, stream=True)
        for kind, messages in work:  # identity without streaming, once per prompt
            whole = {
                name: request(port, messages, max_tokens, kind.extra, stream=False) for name, port in ports.items()
            }
            identical.setdefault(kind.name, []).append(all(whole["native"][k] == whole["lookup"][k] for k in same))
        for round_ in range(rounds):
            for index, (kind, messages) in enumerate(work):
                order = ["native", "lookup"] if (round_ + index) % 2 == 0 else ["lookup", "native"]
                got = {name: request(ports[name], messages, max_tokens, kind.extra, stream=True) for name in order}
                names[got["lookup"]["id"]] = kind.name
                identical[kind.name].append(all(got["native"][k] == got["lookup"][k] for k in same))
                if got["native"]["decode_s"] > 0 and got["lookup"]["decode_s"] > 0:
                    pairs.setdefault(kind.name, []).append(got["native"]["decode_s"] / got["lookup"]["decode_s"])
                for name, reply in got.items():
                    key = (kind.name, index, name)
                    seconds = min(reply["decode_s"], best.get(key, (0, float("inf")))[1])
                    best[key] = (max(reply["tokens"] - 1, 0), seconds)
        time.sleep(0.5)
        log = lookup.log()
    drafts: dict[str, list[int]] = {}
    for ident, tokens, passes, accepted, drafted in LINE.findall(log):
        if ident in names:
            counts = drafts.setdefault(names[ident], [0, 0, 0, 0])
            for i, value in enumerate((tokens, passes, accepted, drafted)):
                counts[i] += int(value)
    verdict = "keeps native generation" not in log
    print(f"model: {model} ({rounds} rounds, max_tokens {max_tokens}, greedy, streamed)")
    for kind in kinds:
        rates = {}
        for name in ("native", "lookup"):
            runs = [value for key, value in best.items() if key[0] == kind.name and key[2] == name]
            seconds = sum(seconds for _, seconds in runs)
            rates[name] = sum(tokens for tokens, _ in runs) / seconds if seconds else 0.0
        ratio = statistics.median(pairs.get(kind.name) or [0.0])
        alike = identical[kind.name]
        tokens, passes, accepted, drafted = drafts.get(kind.name, [0, 0, 0, 0])
        ok = (kind.target is None or ratio >= kind.target) and all(alike)
        verdict = verdict and ok
        target = f"target >= {kind.target:.2f}" if kind.target is not None else "no target"
        print(
            f"{kind.name:15s}: native {rates['native']:7.1f} tok/s, lookup {rates['lookup']:7.1f} tok/s, "
            f"ratio {ratio:.2f} ({target}; {rates['lookup'] / (rates['native'] or 1):.2f} of the rates); "
            f"identical {sum(alike)}/{len(alike)} "
            f"({100 * sum(alike) / len(alike):.0f}%); acceptance {accepted}/{drafted} drafted tokens "
            f"({100 * accepted / drafted if drafted else 0:.1f}%), {tokens / passes if passes else 0:.2f} tokens "
            f"per forward pass: {'PASS' if ok else 'FAIL'}"
        )
    total = re.findall(r"server total: (.*)", log)
    print(f"lookup server total: {total[-1] if total else 'no lookup replies'}")
    if "keeps native generation" in log:
        print(
            "FAIL: some replies kept native generation:", *sorted(set(re.findall(r"keeps native generation .*", log)))
        )
    return verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--model", type=Path, help="serve this model instead of the cached copy model")
    args = parser.parse_args()
    model = args.model or build_model()
    logs = CACHE / "bench-prompt-lookup"
    logs.mkdir(parents=True, exist_ok=True)
    verdict = measure(model, PLAIN_KINDS, args.rounds, args.max_tokens, logs)
    print(f"thinking vocabulary (thinking off: enable_thinking false; on: reasoning_budget {THINKING_BUDGET}):")
    thinking = thinking_copy(model) if args.model is None else None
    if thinking is not None:
        verdict = measure(thinking, THINKING_KINDS, args.rounds, args.max_tokens, logs) and verdict
    else:
        print("skipped: --model was given (the thinking copy is made of the cached copy model)")
    print("verdict:", "PASS" if verdict else "FAIL")
    return 0 if verdict else 1


if __name__ == "__main__":
    raise SystemExit(main())
