"""Measure a 2-rank group (mlx.launch, ring backend over loopback, CPU) against one process, side by side in one run.

Three servers of the wrapped entry serve the same random-weight llama (built here): one process, a
tensor-parallel group of 2 ranks under our launcher (``mlx_agent.runtime.distributed.launcher``), and the same
group under plain ``mlx.launch``. Printed together:

* decode tokens/s, greedy, non-streaming, interleaved rounds (information: on one machine, two ranks share
  its cores and talk over loopback, so a group is slower here; across Macs it holds a model one cannot);
  ``seeded`` is the unbatched path, whose stop the ranks agree on every few tokens;
* idle CPU (cores, psutil, over ``--idle-seconds`` with no request in flight) of each launcher and each rank:
  the launcher's target is <= 0.02 core (plain mlx.launch's forwarder spins at most of one).

Usage (from the repository root): ``python scripts/bench_distributed.py [--rounds N] [--max-tokens N]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.e2e.wrapped_support import running  # noqa: E402  (the repository root is on the path now)
from tests.fixtures.group import Group, running_group  # noqa: E402

TINY_MODEL = REPO / "tests" / "fixtures" / "tiny_model.py"
TARGET_LAUNCHER_CORES = 0.02
PROMPTS = ["Tell me about the weather.", "Write a function that adds two numbers.", "What is the capital of France?"]


def idle_cores(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Return each process's CPU use in cores over ``seconds`` (user + system time, psutil)."""
    import psutil

    processes = {name: psutil.Process(pid) for name, pid in pids.items()}
    before = {name: sum(p.cpu_times()[:2]) for name, p in processes.items()}
    time.sleep(seconds)
    return {name: (sum(p.cpu_times()[:2]) - before[name]) / seconds for name, p in processes.items()}


def group_pids(group: Group, label: str) -> dict[str, int]:
    """Return the launcher's and each rank's pid, named for the table."""
    pids = {f"{label} launcher": group.process.pid}
    for rank, pid in sorted(group.ranks().items()):
        pids[f"{label} rank {rank}"] = pid
    return pids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp, ExitStack() as stack:
        model = Path(tmp) / "model"
        size = ["--hidden-size", str(args.hidden_size), "--num-layers", str(args.num_layers)]
        subprocess.run(
            [sys.executable, str(TINY_MODEL), str(model), *size],
            check=True,
            capture_output=True,
            cwd=REPO,
        )
        one = stack.enter_context(running(model, Path(tmp)))
        ours = stack.enter_context(running_group(model, Path(tmp)))
        plain = stack.enter_context(running_group(model, Path(tmp), plain=True))

        def one_chat(body: dict[str, Any]) -> dict[str, Any]:
            status, answer = one.post(body)
            assert status == 200, answer
            return dict(answer)

        servers = {"1 process": one_chat, "2 ranks": ours.chat, "2 ranks seeded": ours.chat}
        for chat in (one_chat, ours.chat, plain.chat):
            chat({"messages": [{"role": "user", "content": "warm up"}], "max_tokens": 8})
        totals = {name: [0.0, 0.0] for name in servers}
        for round_index in range(args.rounds):
            names = list(servers) if round_index % 2 == 0 else list(reversed(servers))
            for prompt in PROMPTS:
                for name in names:
                    body: dict[str, Any] = {
                        "messages": [{"role": "user", "content": f"{prompt} ({round_index})"}],
                        "max_tokens": args.max_tokens,
                        "temperature": 0,
                    }
                    if name.endswith("seeded"):
                        body["seed"] = round_index
                    started = time.perf_counter()
                    reply = servers[name](body)
                    totals[name][0] += reply["usage"]["completion_tokens"]
                    totals[name][1] += time.perf_counter() - started
        time.sleep(1.0)  # let the last reply's logging settle
        pids = {"1 process": one.process.pid, **group_pids(ours, "ours"), **group_pids(plain, "plain")}
        cores = idle_cores(pids, args.idle_seconds)

    rates = {name: count / spent for name, (count, spent) in totals.items()}
    print(
        f"model: random llama, hidden {args.hidden_size}, {args.num_layers} layers; {args.rounds} rounds x "
        f"{len(PROMPTS)} prompts, max_tokens {args.max_tokens}, greedy, non-streaming; ring over loopback, CPU"
    )
    print(f"{'decode':<22} {'tokens/s':>9}  {'vs 1 process':>12}")
    for name, rate in rates.items():
        print(f"  {name:<20} {rate:9.1f}  {rate / rates['1 process']:12.3f}")
    print(f"{'idle CPU':<22} {'cores':>9}   over {args.idle_seconds:.0f} s, no request in flight")
    for name, used in cores.items():
        print(f"  {name:<20} {used:9.3f}")
    launcher = cores["ours launcher"]
    verdict = "PASS" if launcher <= TARGET_LAUNCHER_CORES else "FAIL"
    print(
        f"launcher idle: ours {launcher:.3f} core vs plain mlx.launch {cores['plain launcher']:.3f} "
        f"(target <= {TARGET_LAUNCHER_CORES}) {verdict}"
    )
    print(f"median rank idle (ours): {statistics.median([cores['ours rank 0'], cores['ours rank 1']]):.3f} core")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
