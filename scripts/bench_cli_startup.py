"""Measure how close mlx-agent's ``--json`` commands start to a bare interpreter, and what they import.

In one run, with a temporary ``MLX_AGENT_HOME`` holding 50 serve receipts and a tiny model directory, this
times, in interleaved rounds (median of each):

* ``python -c "import json, os"``                     (the baseline: an interpreter that can print JSON)
* ``mlx-agent serve status --json``                   (50 receipts whose processes have exited)
* ``mlx-agent serve status --json``                   (45 exited + 5 live processes with another argv,
                                                       so their state is ``foreign``)
* ``mlx-agent serve start --path DIR --port P --json`` (a preview; nothing is started)

Each round runs every command once, in a rotated order, so each command is paired with the baseline run in
the same round; the ratio of a command is the median of its per-round ratios to that baseline, printed with
the rounds' min and max. Target: ratio <= 2.0 (PASS/FAIL is printed; a miss does not change the exit status,
since wall times on a shared machine are noisy). Bytecode is written and used as on a user's machine
(``PYTHONDONTWRITEBYTECODE`` is dropped from the commands' environment, and a warm-up round writes it).

Each command is also run once under ``python -X importtime``; the 15 largest cumulative import costs are
printed, and the run exits 1 if any forbidden module was imported: mlx, mlx_lm, mlx_vlm, transformers,
torch, rich, jsonschema, or any huggingface_hub submodule other than ``huggingface_hub.constants``.

Usage (from the repository root): ``python scripts/bench_cli_startup.py [--rounds N]``
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_agent.supervise.ports import free_port

REPO = Path(__file__).resolve().parent.parent
LAUNCHER = REPO / "scripts" / "mlx-agent"
TINY_MODEL = REPO / "tests" / "fixtures" / "tiny_model.py"

TARGET_RATIO = 2.0
RECEIPTS = 50
FOREIGN = 5
FIRST_PORT = 20000
TOP = 15

# Top-level packages that must never be imported by the CLI's --json paths.
FORBIDDEN_PACKAGES = ("mlx", "mlx_lm", "mlx_vlm", "transformers", "torch", "rich", "jsonschema")
# huggingface_hub itself is lazy; only its constants module is cheap enough for the CLI.
HF_ALLOWED = ("huggingface_hub", "huggingface_hub.constants")


@dataclass(frozen=True)
class Command:
    """One command line to time, and the environment it runs in."""

    label: str
    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class ImportRecord:
    """One line of ``-X importtime`` output (times in microseconds)."""

    name: str
    depth: int
    self_us: int
    cumulative_us: int


# ---------------------------------------------------------------------------------------------- fixtures


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")


def build_minimal_model(out_dir: Path) -> Path:
    """Write a model directory that a preview accepts: config, tokenizer files and one safetensors file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_json(
        out_dir / "config.json",
        {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 512},
    )
    _write_json(out_dir / "tokenizer.json", {"version": "1.0", "model": {"type": "BPE", "vocab": {}}})
    _write_json(out_dir / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast"})
    data_size = 512 * 64
    header = json.dumps(
        {
            "__metadata__": {"format": "mlx"},
            "model.embed_tokens.weight": {"dtype": "U8", "shape": [512, 64], "data_offsets": [0, data_size]},
        }
    ).encode()
    header += b" " * (-len(header) % 8)
    with open(out_dir / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(header)) + header)
        fh.write(bytes(data_size))
    return out_dir


def build_model(out_dir: Path) -> tuple[Path, str]:
    """Build the tiny model with the test fixture if it works here, else a minimal one; say which."""
    if TINY_MODEL.is_file():
        proc = subprocess.run(
            [sys.executable, str(TINY_MODEL), str(out_dir)], capture_output=True, text=True, timeout=300, check=False
        )
        if proc.returncode == 0 and (out_dir / "config.json").is_file():
            return out_dir, "tests/fixtures/tiny_model.py"
        shutil.rmtree(out_dir, ignore_errors=True)
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(f"note: tiny_model.py failed ({tail}); using a minimal model directory", file=sys.stderr)
    return build_minimal_model(out_dir), "minimal (built by this script)"


def exited_pid() -> int:
    """Return the pid of a process that has started and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def create_time(pid: int) -> float:
    """Return the process's create time as psutil computes it, so a receipt matches on birth."""
    try:
        import psutil

        value: float = psutil.Process(pid).create_time()
        return value
    except Exception:
        return time.time()


def receipt(port: int, pid: int, created: float, argv: list[str], model: str, log_dir: Path) -> dict[str, Any]:
    """Return a serve receipt with the fields ``serve status`` reads."""
    return {
        "format_version": "1.0",
        "kind": "serve",
        "port": port,
        "pid": pid,
        "pgid": pid,
        "create_time": created,
        "argv": argv,
        "host": "127.0.0.1",
        "base_url": f"http://127.0.0.1:{port}",
        "runtime": "mlx_lm",
        "model": model,
        "repo": None,
        "log_path": str(log_dir / f"{port}.log"),
        "started_at": "2025-01-01T00:00:00.000+00:00",
        "ready_at": "2025-01-01T00:00:05.000+00:00",
        "preview_hash": "0" * 64,
    }


def write_receipts(home: Path, model: Path, live: list[subprocess.Popen[bytes]]) -> Path:
    """Write 50 receipts under ``home``; the first ``len(live)`` point at live processes with another argv."""
    directory = home / "receipts" / "serve"
    directory.mkdir(parents=True, exist_ok=True)
    server_argv = [sys.executable, "-m", "mlx_agent.runtime", "--model", str(model), "--host", "127.0.0.1"]
    for i in range(RECEIPTS):
        port = FIRST_PORT + i
        argv = [*server_argv, "--port", str(port)]
        if i < len(live):
            # Same pid and birth as the live process, but not the argv it runs: the reused-pid case.
            pid = live[i].pid
            doc = receipt(port, pid, create_time(pid), argv, str(model), directory)
        else:
            pid = exited_pid()
            doc = receipt(port, pid, time.time(), argv, str(model), directory)
        _write_json(directory / f"{port}.json", doc)
        (directory / f"{port}.json").chmod(0o600)
    return directory


# ---------------------------------------------------------------------------------------------- timing


def run_once(cmd: Command) -> float:
    """Run a command with its output discarded and return its wall time in seconds."""
    started = time.perf_counter()
    proc = subprocess.run(cmd.argv, env=cmd.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd.label} exited {proc.returncode}: {' '.join(cmd.argv)}")
    return elapsed


def time_interleaved(commands: list[Command], rounds: int) -> dict[str, list[float]]:
    """Time every command once per round, rotating the order each round so none always runs first."""
    for cmd in commands:  # warm-up: page cache, __pycache__
        run_once(cmd)
    samples: dict[str, list[float]] = {cmd.label: [] for cmd in commands}
    for r in range(rounds):
        shift = r % len(commands)
        for cmd in commands[shift:] + commands[:shift]:
            samples[cmd.label].append(run_once(cmd))
    return samples


# ---------------------------------------------------------------------------------------------- imports


def parse_importtime(stderr: str) -> list[ImportRecord]:
    """Parse ``-X importtime`` lines into records, keeping the nesting depth of each module."""
    records: list[ImportRecord] = []
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue  # the header line
        raw_name = parts[2].rstrip()
        name = raw_name.lstrip(" ")
        depth = (len(raw_name) - len(name) - 1) // 2
        records.append(ImportRecord(name, depth, int(parts[0]), int(parts[1])))
    return records


def importtime(cmd: Command) -> list[ImportRecord]:
    """Run a command once under ``-X importtime`` and return what it imported."""
    argv = [cmd.argv[0], "-X", "importtime", *cmd.argv[1:]]
    proc = subprocess.run(argv, env=cmd.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd.label} under -X importtime exited {proc.returncode}")
    return parse_importtime(proc.stderr)


def forbidden(records: list[ImportRecord]) -> list[str]:
    """Return the forbidden modules among the imported ones, in import order."""
    bad = []
    for rec in records:
        top = rec.name.split(".")[0]
        if top in FORBIDDEN_PACKAGES or (top == "huggingface_hub" and rec.name not in HF_ALLOWED):
            bad.append(rec.name)
    return bad


def report_imports(cmd: Command, records: list[ImportRecord]) -> list[str]:
    """Print the top cumulative import costs of a command and return the forbidden modules it imported."""
    top_level_ms = sum(r.cumulative_us for r in records if r.depth == 0) / 1000
    print(f"\n{cmd.label}: {len(records)} modules imported, {top_level_ms:.1f} ms in top-level imports")
    print(f"  top {TOP} by cumulative time (ms; depth = nesting level in the import tree):")
    print(f"  {'cumul':>8} {'self':>8} {'depth':>5}  module")
    for rec in sorted(records, key=lambda r: r.cumulative_us, reverse=True)[:TOP]:
        print(f"  {rec.cumulative_us / 1000:8.1f} {rec.self_us / 1000:8.1f} {rec.depth:5d}  {rec.name}")
    bad = forbidden(records)
    hf = [r.name for r in records if r.name in HF_ALLOWED]
    if hf:
        print(f"  note: imported {', '.join(hf)} (allowed)")
    print(f"  forbidden imports: {summarise(bad) if bad else 'none'}")
    return bad


def summarise(modules: list[str]) -> str:
    """Name forbidden imports by package with a count; huggingface_hub submodules are named exactly."""
    groups: dict[str, list[str]] = {}
    for name in modules:
        groups.setdefault(name.split(".")[0], []).append(name)
    parts = []
    for top, names in groups.items():
        if top == "huggingface_hub":
            shown = ", ".join(names[:20]) + (f", ... ({len(names) - 20} more)" if len(names) > 20 else "")
            parts.append(f"huggingface_hub heavy submodules [{shown}]")
        else:
            parts.append(
                f"{top} ({len(names)} module{'s' if len(names) != 1 else ''}: {names[0]}, ...)"
                if len(names) > 1
                else top
            )
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per command (default 20)")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="mlx-agent-bench-"))
    live: list[subprocess.Popen[bytes]] = []
    try:
        model, model_kind = build_model(tmp / "model")
        home_exited = tmp / "home-exited"
        home_foreign = tmp / "home-foreign"
        write_receipts(home_exited, model, [])
        live = [subprocess.Popen(["sleep", "600"]) for _ in range(FOREIGN)]
        write_receipts(home_foreign, model, live)
        port = free_port()

        # Without bytecode every run would compile mlx-agent's modules anew, which no installed copy does.
        dropped = ("PYTHONPROFILEIMPORTTIME", "PYTHONDONTWRITEBYTECODE")
        base_env = {k: v for k, v in os.environ.items() if k not in dropped}
        env_exited = {**base_env, "MLX_AGENT_HOME": str(home_exited)}
        env_foreign = {**base_env, "MLX_AGENT_HOME": str(home_foreign)}
        py = sys.executable
        baseline = Command('python -c "import json, os"', [py, "-c", "import json, os"], base_env)
        status = Command(
            "serve status --json (50 exited)", [py, str(LAUNCHER), "serve", "status", "--json"], env_exited
        )
        status_foreign = Command(
            f"serve status --json ({RECEIPTS - FOREIGN} exited + {FOREIGN} foreign)",
            [py, str(LAUNCHER), "serve", "status", "--json"],
            env_foreign,
        )
        preview = Command(
            "serve start --json (preview)",
            [py, str(LAUNCHER), "serve", "start", "--path", str(model), "--port", str(port), "--json"],
            env_exited,
        )
        # The floor: the standard-library modules any JSON-printing CLI with paths, hashes and sockets needs.
        floor = Command(
            "floor: python -c 'import json, pathlib, hashlib, socket'",
            [py, "-c", "import json, pathlib, hashlib, socket"],
            base_env,
        )
        commands = [baseline, floor, status, status_foreign, preview]
        cli_commands = commands[2:]

        # Check that each command does what is measured before timing it.
        for home_env, want in (
            (env_exited, {"exited": RECEIPTS}),
            (env_foreign, {"exited": RECEIPTS - FOREIGN, "foreign": FOREIGN}),
        ):
            out = subprocess.run(
                [py, str(LAUNCHER), "serve", "status", "--json"],
                env=home_env,
                capture_output=True,
                text=True,
                check=False,
            )
            servers = json.loads(out.stdout)["data"]["servers"]
            states: dict[str, int] = {}
            for server in servers:
                states[server["state"]] = states.get(server["state"], 0) + 1
            if states != want:
                print(f"setup error: status reported states {states}, expected {want}", file=sys.stderr)
                return 2
        out = subprocess.run(preview.argv, env=preview.env, capture_output=True, text=True, check=False)
        doc = json.loads(out.stdout)
        if out.returncode != 0 or doc["status"] != "ok" or "plan" not in doc["data"]:
            print(f"setup error: the preview failed: {out.stdout[-2000:]}{out.stderr[-2000:]}", file=sys.stderr)
            return 2

        print(f"python: {py} ({sys.version.split()[0]})")
        print(f"model dir: {model_kind}; receipts: {RECEIPTS} per home; preview port {port}")
        print(f"rounds: {args.rounds} interleaved (after one warm-up round); target ratio <= {TARGET_RATIO}")
        samples = time_interleaved(commands, args.rounds)
        base = samples[baseline.label]
        head = f"{'command':<46} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'ratio':>6} {'min':>5} {'max':>5}"
        print(f"\n{head}  verdict")
        for cmd in commands:
            times = samples[cmd.label]
            ratios = [t / b for t, b in zip(times, base, strict=True)]  # each paired with its round's baseline
            ratio = statistics.median(ratios)
            verdict = "" if cmd in (baseline, floor) else ("PASS" if ratio <= TARGET_RATIO else "FAIL")
            print(
                f"{cmd.label:<46} {statistics.median(times) * 1000:10.1f} {min(times) * 1000:8.1f} "
                f"{max(times) * 1000:8.1f} {ratio:6.2f} {min(ratios):5.2f} {max(ratios):5.2f}  {verdict}"
            )

        print("\n-X importtime, one run each")
        bad_by_command: dict[str, list[str]] = {}
        for cmd in cli_commands:
            bad = report_imports(cmd, importtime(cmd))
            if bad:
                bad_by_command[cmd.label] = bad
        if bad_by_command:
            print("\nFAIL: forbidden modules imported:")
            for label, bad in bad_by_command.items():
                print(f"  {label}: {summarise(bad)}")
            return 1
        print("\nOK: no forbidden module imported by any command")
        return 0
    finally:
        for proc in live:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
