"""Measure what deciding a model's agent support costs a serve preview (rendering its chat template in the sandbox).

Part 1, in this process: for each real template of the test corpus (tests/templates/), the median time of
``template_render.probe`` (compile once, then the renders the plan makes), after one unmeasured call that pays
for importing jinja2.

Part 2, the CLI: previews (``mlx-agent serve start --path DIR --json``) of three model directories identical but
for their tokenizer_config.json's chat template: none (nothing to render: the preview without the probe's
cost), the tiny ChatML one, and the corpus template whose probe took longest. Timed in interleaved rounds; the
medians and the ratios to the template-less preview are printed. Nothing is asserted: the numbers go to the docs.

Usage (from the repository root): ``python scripts/bench_agent_probe.py [--rounds N]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
LAUNCHER = REPO / "scripts" / "mlx-agent"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def model_dir(out: Path, template: str | None) -> Path:
    """Write a model directory the plan accepts (its one weight file a valid safetensors header)."""
    out.mkdir(parents=True)
    config = {"model_type": "llama", "max_position_embeddings": 4096, "vocab_size": 8}
    (out / "config.json").write_text(json.dumps(config))
    (out / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {}, "merges": []}}))
    tokenizer: dict[str, object] = {"eos_token": "<|im_end|>", "bos_token": "<s>"}
    if template is not None:
        tokenizer["chat_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    header = json.dumps({"w": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}}).encode()
    header += b" " * (-len(header) % 8)
    (out / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    return out


def probe_times(rounds: int) -> list[tuple[str, float]]:
    """Return each corpus template's median probe time in ms, slowest first."""
    from mlx_agent.plan.template_render import probe
    from tests.template_corpus import corpus

    templates = corpus()
    probe(templates[0].source, {})  # jinja2's import, once
    times = []
    for entry in templates:
        tokens = {"bos_token": entry.bos_token, "eos_token": entry.eos_token}
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            probe(entry.source, tokens)
            samples.append(time.perf_counter() - started)
        times.append((entry.name, statistics.median(samples) * 1000))
    return sorted(times, key=lambda item: -item[1])


def main() -> int:
    """Print both parts' medians (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=9, help="timed rounds per case (default 9)")
    args = parser.parse_args()
    times = probe_times(args.rounds)
    print(f"{'template':<48} {'probe ms':>9}")
    for name, ms in times:
        print(f"{name:<48} {ms:9.1f}")
    from tests.template_corpus import template

    slowest = times[0][0]
    tmp = Path(tempfile.mkdtemp(prefix="mlx-agent-probe-"))
    try:
        cases = {
            "no template": model_dir(tmp / "none", None),
            "ChatML": model_dir(tmp / "chatml", CHATML),
            slowest: model_dir(tmp / "slowest", template(slowest).source),
        }
        env = {**os.environ, "MLX_AGENT_HOME": str(tmp / "home")}
        argv = {
            name: [sys.executable, str(LAUNCHER), "serve", "start", "--path", str(path), "--port", "18555", "--json"]
            for name, path in cases.items()
        }
        for command in argv.values():  # warm-up, and a check that each preview succeeds
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        samples: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else reversed(names):
                started = time.perf_counter()
                subprocess.run(argv[name], env=env, check=True, stdout=subprocess.DEVNULL)
                samples[name].append(time.perf_counter() - started)
        base = statistics.median(samples["no template"])
        print(f"\n{'preview (CLI)':<48} {'median ms':>9} {'ratio':>6}")
        for name, values in samples.items():
            median = statistics.median(values)
            print(f"{name:<48} {median * 1000:9.1f} {median / base:6.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
