"""Measure the whole stack under concurrent load against bare mlx_lm.server, side by side in one run (issue 29).

Every server serves the same random-weight model built here (llama, 256 wide, 4 layers, as
``tests/fixtures/tiny_model.py`` builds it). "Ours" is the whole stack: an eager ``python -m mlx_agent.gateway``
front over the wrapped worker on its socket (``bench_gateway.front``); "bare" is ``mlx_lm.server`` on TCP. Three
parts, each in interleaved rounds (the order alternates each round), each ratio printed with its rounds and
PASS/FAIL against the issue's target:

1. Throughput: 1, 4 and 8 concurrent greedy requests of ``--tokens`` tokens, aggregate completion tokens/s
   (all tokens over the time from the common start to the last reply's end), ours over bare measured back to
   back (the order alternating): chat
   completions whole and streamed (target >= 0.98), and ours through Messages and Responses (streamed) over
   bare's streamed chat (target >= 0.97). A second bare server measured against the first the same way (an
   A/A pair: the same software on both sides) shows what the machine's noise alone does to a ratio: where it
   is as far from 1.000 as a verdict's margin, that verdict says nothing either way. Each stream count starts with
   a round that is not measured (a GPU backend compiles kernels for each new batch size). Beside the verdicts, the
   servers' own CPU time per completion token (the front and its worker, against bare's process) over all
   rounds: on a machine whose cores the client, the front and the worker share, throughput follows it. It is
   steadier than wall time, yet it too moved about 5% between runs on a 2-core machine (docs/profiles.md).
2. Prompt lookup: two whole stacks, plain and with ``--mlx-agent-prompt-lookup``, on the model
   ``scripts/bench_prompt_lookup.py`` trains to copy (cached under ``.cache``; about three minutes the first
   time), as a random model copies nothing a draft could match. Four concurrent streamed chats, lookup over
   plain (target >= 0.98: lookup requests keep batching), and a code edit alone (a code block of its corpus to
   rewrite), the plain stack's decode time (first token to last) over lookup's (target >= 2.0). The replies
   must be the same with and without lookup.
3. A short request during a long prefill: a long prompt (``--long-tokens``, prefilled in chunks of
   ``--prefill-step`` tokens: the issue's 30k tokens in 2k chunks, scaled to what a CPU prefills in tens of
   seconds) is sent, and a short request follows after a quarter of the long prompt's prefill time alone. The
   short request's time to first token over the long prompt's prefill time alone (target <= 0.25), and the
   long request's rate alone over its rate beside the short one (its time with over without: target
   >= 0.90, a drop of at most 10%). Bare mlx_lm is measured the same way, for reference.

The machine is noisy: each ratio is the median of its rounds, and the run exits 1 only if something breaks.

Usage (from the repository root): ``python scripts/bench_concurrency.py [--quick] [--rounds N] [--tokens N]
[--long-tokens N] [--prefill-step N] [--parts 123] [--streams 1,4,8]``; ``--quick`` is one round of small sizes, to
check that it runs.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import bench_gateway  # noqa: E402  (the sibling script that starts an eager front)
import bench_prompt_lookup  # noqa: E402  (the sibling script that trains the copy model)
from bench_gateway_apis import chat_event, messages_event, responses_event, timed_stream  # noqa: E402

from tests.e2e.wrapped_support import running  # noqa: E402

STACK_TARGET, API_TARGET, LOOKUP_TARGET, CODE_TARGET = 0.98, 0.97, 0.98, 2.0
TTFT_TARGET, LONG_TARGET = 0.25, 0.90
TINY_MODEL = REPO / "tests" / "fixtures" / "tiny_model.py"
SHORT = "Hello! How are you today?"


class Target:
    """A server to measure: its port, the model name its requests give, and its first process (``pid``)."""

    def __init__(self, name: str, port: int, model: str, pid: int) -> None:
        self.name = name
        self.port = port
        self.model = model
        self.pid = pid

    def cpu_seconds(self) -> float:
        """Return the CPU time (user and system) its processes used so far: the front and its worker, or bare's."""
        root = psutil.Process(self.pid)
        total = 0.0
        for process in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                total += times.user + times.system
        return total


def body(target: Target, api: str, prompt: str, tokens: int) -> tuple[str, dict[str, Any]]:
    """Return the path and greedy request body of ``api`` for ``prompt``."""
    messages = [{"role": "user", "content": prompt}]
    if api == "messages":
        return "/v1/messages", {
            "model": target.model,
            "messages": messages,
            "max_tokens": tokens,
            "temperature": 0,
            "stream": True,
        }
    if api == "responses":
        return "/v1/responses", {
            "model": target.model,
            "input": prompt,
            "max_output_tokens": tokens,
            "temperature": 0,
            "stream": True,
            "store": False,
        }
    chat: dict[str, Any] = {"model": target.model, "messages": messages, "max_tokens": tokens, "temperature": 0}
    if api == "chat_stream":
        chat.update(stream=True, stream_options={"include_usage": True})
    return "/v1/chat/completions", chat


# Ours through each API, and bare's counterpart it is measured beside.
PAIRS = [("chat", "chat"), ("chat_stream", "chat_stream"), ("messages", "chat_stream"), ("responses", "chat_stream")]
READERS = {"chat_stream": chat_event, "messages": messages_event, "responses": responses_event}


def one_request(target: Target, api: str, prompt: str, tokens: int) -> int:
    """Send one request; return its completion tokens."""
    path, payload = body(target, api, prompt, tokens)
    if api == "chat":
        reply = json.loads(bench_gateway.post(target.port, path, payload))
        return int(reply["usage"]["completion_tokens"])
    return timed_stream(target.port, path, payload, READERS[api])[0]


def together(calls: Sequence[Callable[[], Any]]) -> tuple[list[Any], float]:
    """Run ``calls`` at once, one thread each; return their results and the seconds from the start to the last."""
    start = threading.Barrier(len(calls) + 1)
    results: list[Any] = [None] * len(calls)
    failures: list[BaseException] = []

    def run(index: int) -> None:
        start.wait()
        try:
            results[index] = calls[index]()
        except BaseException as error:  # reported in the main thread
            failures.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return results, time.perf_counter() - began


class Cost:
    """The servers' CPU seconds and the completion tokens they cost, summed over measurements (per target)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.tokens: dict[str, int] = {}

    def add(self, target: Target, cpu: float, tokens: int) -> None:
        """Count one measurement of ``target``."""
        self.cpu[target.name] = self.cpu.get(target.name, 0.0) + cpu
        self.tokens[target.name] = self.tokens.get(target.name, 0) + tokens

    def per_token(self, target: Target) -> float:
        """Return ``target``'s CPU seconds per completion token (NaN if it returned none)."""
        tokens = self.tokens.get(target.name, 0)
        return self.cpu.get(target.name, 0.0) / tokens if tokens else math.nan


def rate(target: Target, api: str, streams: int, tokens: int, tag: str, cost: Cost | None = None) -> float:
    """Return the aggregate completion tokens/s of ``streams`` concurrent requests (their CPU added to ``cost``)."""
    calls = [
        partial(one_request, target, api, f"Story {tag}.{i}: tell me a long story.", tokens) for i in range(streams)
    ]
    cpu = target.cpu_seconds()
    counts, seconds = together(calls)
    if cost is not None:
        cost.add(target, target.cpu_seconds() - cpu, sum(counts))
    return float(sum(counts) / seconds)


def verdict(ratio: float, target: float, at_most: bool = False) -> str:
    """Return PASS or FAIL for ``ratio`` against ``target`` (at least it, or at most it)."""
    ok = ratio <= target if at_most else ratio >= target
    return "PASS" if ok else "FAIL"


def report(label: str, ratios: list[float], target: float, at_most: bool = False) -> None:
    """Print a ratio's median, its rounds and its verdict."""
    median = statistics.median(ratios)
    rounds = ", ".join(f"{r:.3f}" for r in ratios)
    sign = "<=" if at_most else ">="
    print(f"  {label:<44} {median:6.3f}  (rounds: {rounds}; target {sign} {target}) {verdict(median, target, at_most)}")


def throughput(ours: Target, bare: Target, twin: Target, rounds: int, tokens: int, stream_counts: list[int]) -> None:
    """Part 1: ours over bare at each stream count, per API, and bare's twin over bare (the noise)."""
    print(f"1. throughput, ours (front + wrapped worker) / bare mlx_lm.server, {tokens} tokens per request:")
    for streams in stream_counts:
        ratios: dict[str, list[float]] = {api: [] for api in ("chat", "chat_stream", "messages", "responses")}
        rates: dict[str, list[float]] = {"bare": [], "ours": []}
        noise: list[float] = []
        costs = {api: Cost() for api in ratios}
        # A round at this many streams first, not measured: a GPU backend compiles kernels for each new batch size.
        warm = [(bare, "chat"), (bare, "chat_stream"), (twin, "chat_stream"), *((ours, api) for api, _ in PAIRS)]
        for target, api in warm:
            rate(target, api, streams, tokens, f"{streams}.warm")
        for round_ in range(rounds):
            twins = [bare, twin] if round_ % 2 == 0 else [twin, bare]
            tag = f"{streams}.{round_}.aa"
            both = {target.name: rate(target, "chat_stream", streams, tokens, tag) for target in twins}
            noise.append(both[twin.name] / both[bare.name])
            # Back-to-back pairs: each of ours next to bare's counterpart (bare speaks chat completions only).
            for index, (api, counterpart) in enumerate(PAIRS):
                tag = f"{streams}.{round_}.{index}"
                pair = [(bare, counterpart), (ours, api)]
                measured: dict[str, float] = {}
                for target, kind in pair if (round_ + index) % 2 == 0 else pair[::-1]:
                    measured[target.name] = rate(target, kind, streams, tokens, tag, costs[api])
                ratios[api].append(measured[ours.name] / measured[bare.name])
                if api == "chat_stream":
                    rates["bare"].append(measured[bare.name])
                    rates["ours"].append(measured[ours.name])
        print(
            f" {streams} stream(s): streamed chat, bare {statistics.median(rates['bare']):.1f} tok/s, "
            f"ours {statistics.median(rates['ours']):.1f} tok/s"
        )
        median = statistics.median(noise)
        print(
            f"  {'A/A: bare twin / bare (streamed chat)':<44} {median:6.3f}  (rounds: "
            f"{', '.join(f'{r:.3f}' for r in noise)}; the noise: {abs(1 - median):.3f} off 1.000)"
        )
        report("chat completions, whole", ratios["chat"], STACK_TARGET)
        report("chat completions, streamed", ratios["chat_stream"], STACK_TARGET)
        report("Messages (streamed) / bare streamed chat", ratios["messages"], API_TARGET)
        report("Responses (streamed) / bare streamed chat", ratios["responses"], API_TARGET)
        # What a machine whose cores are all busy turns into throughput, read from the servers' own CPU time.
        spent = ", ".join(
            f"{api} {costs[api].per_token(bare) * 1e3:.2f} / {costs[api].per_token(ours) * 1e3:.2f}" for api in costs
        )
        print(f"  CPU ms per token, bare / ours (front and worker): {spent}")
        for label, api in (("whole", "chat"), ("streamed", "chat_stream")):
            ratio = costs[api].per_token(bare) / costs[api].per_token(ours)
            print(f"  {'CPU per token, bare / ours, chat ' + label:<44} {ratio:6.3f}  (all rounds; information)")


def decode_stream(target: Target, messages: list[dict[str, Any]], tokens: int) -> tuple[str, float, float, int]:
    """Stream one greedy chat; return its text, time to first token, decode time (first to last) and tokens."""
    payload = {
        "model": target.model,
        "messages": messages,
        "max_tokens": tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=1800)
    started = time.perf_counter()
    text, first, last, count = "", 0.0, 0.0, 0
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(payload), {"Content-Type": "application/json"})
        answer = conn.getresponse()
        if answer.status != 200:
            raise RuntimeError(f"{target.name}: {answer.status} {answer.read()[:300]!r}")
        while line := answer.readline():
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                count = int(event["usage"]["completion_tokens"])
            for choice in event.get("choices", []):
                piece = choice.get("delta", {}).get("content") or ""
                if piece:
                    first = first or time.perf_counter()
                    last = time.perf_counter()
                    text += piece
    finally:
        conn.close()
    return text, (first or time.perf_counter()) - started, last - first, count


def keep(results: dict[str, Any], key: str, target: Target, messages: list[dict[str, Any]], tokens: int) -> None:
    """Stream one chat into ``results[key]`` (a thread's target)."""
    results[key] = decode_stream(target, messages, tokens)


def lookup_part(plain: Target, lookup: Target, rounds: int, tokens: int) -> None:
    """Part 2: lookup over plain, four streams at once and a code edit alone; the replies must match."""
    print("2. prompt lookup, the whole stack with --prompt-lookup / without (the copy model):")
    kinds = bench_prompt_lookup.prompts()
    edits = [messages for kind, messages in kinds if kind == "code_edit"]
    chats = [messages for kind, messages in kinds if kind == "chat"]
    four: list[float] = []
    code: list[float] = []
    same = total = 0
    for target in (plain, lookup):  # four streams once first, not measured (a GPU compiles their batch's kernels)
        together([partial(decode_stream, target, chats[i % len(chats)], tokens) for i in range(4)])
    for round_ in range(rounds):
        order = [plain, lookup] if round_ % 2 == 0 else [lookup, plain]
        rates: dict[str, float] = {}
        texts: dict[str, list[str]] = {}
        for target in order:
            calls = [partial(decode_stream, target, chats[(4 * round_ + i) % len(chats)], tokens) for i in range(4)]
            replies, seconds = together(calls)
            rates[target.name] = sum(r[3] for r in replies) / seconds
            texts[target.name] = [r[0] for r in replies]
        four.append(rates[lookup.name] / rates[plain.name])
        same += sum(a == b for a, b in zip(texts[plain.name], texts[lookup.name], strict=True))
        total += 4
        decode: dict[str, float] = {}
        edit = edits[round_ % len(edits)]
        for target in order:
            text, _, seconds, _ = decode_stream(target, edit, 2 * tokens)
            decode[target.name] = seconds
            texts.setdefault("edit", []).append(text)
        code.append(decode[plain.name] / decode[lookup.name])
        same += texts["edit"][0] == texts["edit"][1]
        total += 1
    report("4 streams: lookup tok/s / plain tok/s", four, LOOKUP_TARGET)
    report("code edit alone: plain decode s / lookup's", code, CODE_TARGET)
    print(f"  identical replies with and without lookup: {same}/{total} {'PASS' if same == total else 'FAIL'}")


def long_prompt(model: Path, tokens: int, salt: str) -> str:
    """Return a prompt of about ``tokens`` tokens of the model's tokenizer (``salt`` keeps it out of any cache)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    words = [f"{salt} item{i % 89} is number {i}," for i in range(tokens)]
    low, high = 1, len(words)
    while low < high:  # the fewest words with at least ``tokens`` tokens
        middle = (low + high) // 2
        if len(tokenizer.encode(" ".join(words[:middle])).ids) >= tokens:
            high = middle
        else:
            low = middle + 1
    return " ".join(words[:low])


def prefill_part(targets: list[Target], model: Path, rounds: int, tokens: int, long_tokens: int) -> None:
    """Part 3: a short request's time to first token during a long prefill, and the long one's rate."""
    print(f"3. a short request during a long prefill ({long_tokens}-token prompt, {tokens} tokens per reply):")
    ttft: dict[str, list[float]] = {t.name: [] for t in targets}
    kept: dict[str, list[float]] = {t.name: [] for t in targets}
    prefill: dict[str, list[float]] = {t.name: [] for t in targets}
    for round_ in range(rounds):
        for target in targets if round_ % 2 == 0 else targets[::-1]:
            alone_prompt = long_prompt(model, long_tokens, f"{target.name}-alone-{round_}")
            started = time.perf_counter()
            _, prefill_s, _, _ = decode_stream(target, [{"role": "user", "content": alone_prompt}], tokens)
            alone_total = time.perf_counter() - started
            with_prompt = long_prompt(model, long_tokens, f"{target.name}-with-{round_}")
            results: dict[str, Any] = {}
            long_messages = [{"role": "user", "content": with_prompt}]
            worker = threading.Thread(target=keep, args=(results, "long", target, long_messages, tokens))
            started = time.perf_counter()
            worker.start()
            time.sleep(prefill_s / 4)  # a quarter into the long prefill
            results["short"] = decode_stream(target, [{"role": "user", "content": f"{SHORT} ({round_})"}], tokens)
            worker.join()
            with_total = time.perf_counter() - started
            ttft[target.name].append(results["short"][1] / prefill_s)
            kept[target.name].append(alone_total / with_total)
            prefill[target.name].append(prefill_s)
    for target in targets:
        seconds = ", ".join(f"{s:.1f}" for s in prefill[target.name])
        print(f" {target.name}: the long prompt's prefill alone took {seconds} s")
        report(f"{target.name}: short TTFT / long prefill alone", ttft[target.name], TTFT_TARGET, at_most=True)
        report(f"{target.name}: long rate beside the short / alone", kept[target.name], LONG_TARGET)


def warm_up(target: Target, apis: Sequence[str]) -> None:
    """Send one short request of each API, so that no first request is measured."""
    for api in apis:
        one_request(target, api, "warm up", 4)


def build_model(directory: Path) -> Path:
    """Build the benchmark's random model (llama, 256 wide, 4 layers)."""
    model = directory / "model"
    command = [sys.executable, str(TINY_MODEL), str(model), "--hidden-size", "256", "--num-layers", "4"]
    subprocess.run(command, check=True, capture_output=True, cwd=REPO)
    return model


@contextmanager
def stack(directory: Path, model: Path, tokens: int, *flags: str, lookup: bool = False) -> Iterator[Target]:
    """Run the whole stack (an eager front over the wrapped worker: mlx_lm's ``flags``, lookup) until the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    contract = {"prompt_lookup": lookup}
    gateway = bench_gateway.front(directory, model, tokens, eager=True, worker_flags=flags, contract=contract)
    try:
        named = [*flags, *(["--prompt-lookup"] if lookup else [])]
        target = Target(f"ours{'+' + '+'.join(named) if named else ''}", gateway.port, "org/tiny", gateway.proc.pid)
        warm_up(target, ("chat", "chat_stream", "messages", "responses"))
        yield target
    finally:
        gateway.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of small sizes, to check that it runs")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5; 1 with --quick)")
    parser.add_argument("--tokens", type=int, help="tokens per reply (default 64; 16 with --quick)")
    parser.add_argument("--long-tokens", type=int, help="the long prompt's tokens (default 4096; 768 with --quick)")
    parser.add_argument("--prefill-step", type=int, help="prefill chunk (default 256; 64 with --quick)")
    parser.add_argument("--parts", default="123", help="which parts to run (default 123)")
    parser.add_argument("--streams", default="1,4,8", help="part 1's stream counts (default 1,4,8)")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    tokens = args.tokens or (16 if args.quick else 64)
    long_tokens = args.long_tokens or (768 if args.quick else 4096)
    step = str(args.prefill_step or (64 if args.quick else 256))
    streams = [int(count) for count in args.streams.split(",")]
    print(f"model: random llama, 256 wide, 4 layers; {rounds} round(s); greedy")
    with tempfile.TemporaryDirectory(prefix="bench-concurrency-") as tmp, ExitStack() as servers:
        directory = Path(tmp)
        model = build_model(directory)
        ceiling = max(2 * tokens, 64)
        if "1" in args.parts or "3" in args.parts:
            bare_flags = ("--prefill-step-size", step) if "3" in args.parts else ()
            bare_server = servers.enter_context(running(model, directory, *bare_flags, bare=True))
            bare = Target("bare", bare_server.port, "default_model", bare_server.process.pid)
            warm_up(bare, ("chat", "chat_stream"))  # bare mlx_lm loads its model on the first request
        if "1" in args.parts:
            twin_server = servers.enter_context(running(model, directory, *bare_flags, bare=True))
            twin = Target("twin", twin_server.port, "default_model", twin_server.process.pid)
            warm_up(twin, ("chat", "chat_stream"))
            with stack(directory / "ours", model, ceiling) as ours:
                throughput(ours, bare, twin, rounds, tokens, streams)
        if "2" in args.parts:
            copier = bench_prompt_lookup.build_model()
            with (
                stack(directory / "plain", copier, ceiling) as plain,
                stack(directory / "lookup", copier, ceiling, lookup=True) as lookup,
            ):
                lookup_part(plain, lookup, rounds, tokens)
        if "3" in args.parts:
            with stack(directory / "chunked", model, ceiling, "--prefill-step-size", step) as ours:
                ours.name = "ours"
                prefill_part([ours, bare], model, rounds, tokens, long_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
