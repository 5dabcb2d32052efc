"""Measure what each piece of the worker's start-up code gives a user's load, side by side in one run.

A JIT load, an eviction's reload and every ``serve start`` run the same worker start: spawn, imports, the model's
weights and tokenizer, readiness. Two pieces of mlx-agent's code shorten it, and one its stop:

* ``index``: transformers' index of its model files, saved once (``runtime/transformers_index.py``);
* ``blas``: numpy's OpenBLAS told to start one thread, not one a core (``runtime/entry.py``);
* ``teardown``: the exit without the interpreter's teardown of every module (``exiting.py``), timed at stop.

For each model (a Qwen3-0.6B-shaped checkpoint as people download it: 4-bit, weights in shards with their
index, a 151,643-token byte-level BPE tokenizer with vocab.json and merges.txt beside tokenizer.json and the
real Qwen3 chat template; and the suite's tiny model for comparison), it starts the real worker
(``python -m mlx_agent.runtime mlx_lm``, the argv a plan writes) with everything on, and with each piece off
(a ``sitecustomize`` on ``PYTHONPATH`` swaps the piece for what Python does without it), in interleaved
rounds. Per start it records the wall time from spawn to ``/health`` (the model loaded: workers load before
they listen), the worker's CPU at that moment, one chat completion of one token, and the wall time from
SIGTERM to exit. Prints medians and, per piece, the median per-round ratio of "off" over "on".

Information only: no target, and the exit status says nothing about the figures.

Usage (from the repository root): ``python scripts/bench_startup_pieces.py [--rounds N] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# A third piece, the cyclic collector paused over the imports and then frozen, was measured here too and removed:
# off/on 1.00 (wall) and 1.02 (CPU) for the realistic model, within the noise.
PIECES = ("index", "blas", "teardown")

# Swaps one piece (named in BENCH_OFF) for what Python does without it, before the worker's own code runs.
SITECUSTOMIZE = """\
import os, sys
off = os.environ.get("BENCH_OFF", "")
if off == "index":
    import mlx_agent.runtime.transformers_index as t
    t.install = lambda: None
elif off == "teardown":
    import mlx_agent.exiting as e
    def _exit(status):
        raise SystemExit(status)
    e.exit_without_teardown = _exit
"""

QWEN3_0_6B = {  # Qwen/Qwen3-0.6B's config.json, less the fields mlx_lm does not read
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "intermediate_size": 3072,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rms_norm_eps": 1e-6,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]
BPE_TOKENS = 151643


def byte_alphabet() -> list[str]:
    """Return GPT-2's 256 printable stand-ins for bytes, in byte order (what byte-level BPE vocabularies use)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_tokenizer(out: Path) -> None:
    """Write a byte-level BPE tokenizer of Qwen3's size: tokenizer.json, vocab.json, merges.txt and its config."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    rng = random.Random(0)
    vocab = {ch: i for i, ch in enumerate(byte_alphabet())}
    tokens = list(vocab)
    merges: list[tuple[str, str]] = []
    while len(vocab) < BPE_TOKENS:
        left, right = rng.choice(tokens), rng.choice(tokens[:4096])  # short right halves: words grow as in BPE
        merged = left + right
        if merged in vocab or len(merged) > 16:
            continue
        vocab[merged] = len(vocab)
        tokens.append(merged)
        merges.append((left, right))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(SPECIALS)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    template = (REPO / "tests" / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text()
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "chat_template": template,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 131072,
        "added_tokens_decoder": {str(BPE_TOKENS + i): {"content": t, "special": i < 3} for i, t in enumerate(SPECIALS)},
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    (out / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}))


def build_realistic(out: Path) -> Path:
    """Write a 4-bit Qwen3-0.6B-shaped checkpoint with random weights, in shards, as the Hub's MLX ports ship."""
    import mlx.core as mx
    from mlx_lm.models import qwen3
    from mlx_lm.utils import quantize_model

    out.mkdir(parents=True)
    fields: dict[str, Any] = {k: v for k, v in QWEN3_0_6B.items() if k in qwen3.ModelArgs.__dataclass_fields__}
    model = qwen3.Model(qwen3.ModelArgs(**fields))
    mx.eval(model.parameters())
    model, config = quantize_model(model, dict(QWEN3_0_6B), group_size=64, bits=4)
    weights = dict(__import__("mlx.utils", fromlist=["tree_flatten"]).tree_flatten(model.parameters()))
    shards: list[dict[str, Any]] = [{}]
    for key, array in weights.items():  # ~150 MB a shard: a 0.6B model in 4-bit ships in more than one file
        if shards[-1] and sum(a.nbytes for a in shards[-1].values()) + array.nbytes > 150 * 2**20:
            shards.append({})
        shards[-1][key] = array
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        mx.save_safetensors(str(out / name), shard, metadata={"format": "mlx"})
        weight_map.update(dict.fromkeys(shard, name))
    index = {"metadata": {"total_size": sum(int(w.nbytes) for w in weights.values())}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643], "temperature": 0.6}))
    write_tokenizer(out)
    return out


def worker_argv(model: Path, home: Path) -> list[str]:
    """Return the worker argv a serve plan for ``model`` writes, from a real preview."""
    env = {**os.environ, "MLX_AGENT_HOME": str(home)}
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "mlx-agent"), "serve", "start", "--path", str(model), "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    worker: dict[str, Any] = json.loads(out)["data"]["plan"]["models"][0]["worker"]
    argv: list[str] = worker["argv"]
    return argv


class UnixConnection(http.client.HTTPConnection):
    """HTTP over the worker's private Unix socket."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=600)
        self.path = path

    def connect(self) -> None:
        """Connect to the socket file instead of a host and port."""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def ask(path: str, method: str, url: str, body: dict[str, Any] | None = None) -> int:
    """Send one request over the socket; return its status (0 when nothing answers yet)."""
    conn = UnixConnection(path)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, url, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0
    finally:
        conn.close()


def one_start(argv: list[str], work: Path, off: str, site: Path) -> dict[str, float]:
    """Start the worker with piece ``off`` swapped out ("" for none); return its times."""
    import psutil

    sock = str(work / "w.sock")
    cache = work / "cache"
    args = [a.replace("{socket}", sock).replace("{prompt_cache}", str(work / "pc")) for a in argv]
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}", "BENCH_OFF": off, "HF_HUB_OFFLINE": "1"}
    env["XDG_CACHE_HOME"] = str(work / "fresh-cache" if off == "index" else cache)  # the index lives there
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if off == "blas":
        env["OPENBLAS_NUM_THREADS"] = str(os.cpu_count() or 1)
    began = time.perf_counter()
    child = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    proc = psutil.Process(child.pid)
    while ask(sock, "GET", "/health") != 200:
        if child.poll() is not None:
            raise SystemExit(f"the worker exited ({child.returncode}) with {off or 'nothing'} off")
        time.sleep(0.02)  # polling a process we measure: a condition's wait, at the socket's pace
    ready = time.perf_counter() - began
    cpu = sum(proc.cpu_times()[:2])
    asked = time.perf_counter()
    hi = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 1, "temperature": 0}
    if ask(sock, "POST", "/v1/chat/completions", hi) != 200:
        raise SystemExit("the worker did not answer")
    first = ready + time.perf_counter() - asked
    stopping = time.perf_counter()
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=60)
    stop = time.perf_counter() - stopping
    for stale in (work / "fresh-cache",):
        subprocess.run(["rm", "-rf", str(stale)], check=True)
    return {"ready": ready, "cpu": cpu, "first": first, "stop": stop}


def measure(name: str, model: Path, rounds: int, work: Path, site: Path) -> None:
    """Run interleaved rounds of every variant for one model and print the figures."""
    argv = worker_argv(model, work / "home")
    one_start(argv, work, "", site)  # bytecode written, the transformers index saved
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in ("", *PIECES)}
    for r in range(rounds):
        order = list(runs)
        random.Random(r).shuffle(order)
        for off in order:
            runs[off].append(one_start(argv, work, off, site))
    base = runs[""]
    print(f"\n{name}: {rounds} rounds; everything on:")
    for key, what in (("ready", "spawn to ready"), ("cpu", "worker CPU to ready"), ("first", "to first reply")):
        print(f"  {what:22s} median {statistics.median(x[key] for x in base):.3f} s")
    print(f"  {'SIGTERM to exit':22s} median {statistics.median(x['stop'] for x in base):.3f} s")
    for piece in PIECES:
        key = "stop" if piece == "teardown" else "ready"
        keys = (key,) if piece == "teardown" else ("ready", "cpu")
        for k in keys:
            ratios = [o[k] / b[k] for o, b in zip(runs[piece], base, strict=True)]
            off_median = statistics.median(x[k] for x in runs[piece])
            saved = off_median - statistics.median(x[k] for x in base)
            print(
                f"  {piece:9s} off: {k:5s} {off_median:.3f} s, ratio off/on {statistics.median(ratios):.2f} "
                f"(min {min(ratios):.2f}, max {max(ratios):.2f}); the piece saves {saved * 1000:+.0f} ms"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="build (or reuse) the realistic model here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        work = Path(tmp)
        site = work / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (work / "home").mkdir()
        realistic = args.keep or work / "qwen3-0.6b-4bit"
        if not (realistic / "config.json").exists():
            build_realistic(realistic)
        files = sorted(p.name for p in realistic.iterdir())
        size = sum(p.stat().st_size for p in realistic.iterdir()) / 2**20
        print(f"realistic model: {len(files)} files, {size:.0f} MiB: {', '.join(files)}")
        from tests.fixtures.tiny_model import build_tiny_model

        tiny = build_tiny_model(work / "tiny")
        measure("Qwen3-0.6B-shaped, 4-bit", realistic, args.rounds, work, site)
        measure("the suite's tiny model", tiny, args.rounds, work, site)
    return 0


if __name__ == "__main__":
    sys.exit(main())
