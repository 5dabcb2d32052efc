"""A census of one test run: the processes it starts by kind, their CPU by kind, and its slowest tests and files.

    .venv/bin/python scripts/census_tests.py [--json FILE] [--pytest] [ARGS...]

runs ``bash scripts/test ARGS`` (install, checks and tests, as CI does), or with ``--pytest`` only
``pytest ARGS`` (a subset on a busy machine), and prints how many processes of each kind started (worker,
a group's launcher, front, CLI, agent, the test runner's own, the checks', others), the CPU each kind used, the 20
slowest tests, the test files that start the most workers, fronts and CLI runs, and how many assert statements the
tests hold (sharing servers must not cost checks).

How it counts (Linux only): it becomes the run's child subreaper, so that a server the CLI detaches stays in the
run's tree, and reads /proc every ``POLL_S``: a process is the run's when its parent is. A process's CPU is its
last reading; the census reaps the orphans it adopted and reads them as zombies, exactly, but a process that its
own parent reaps between two readings loses what it used since the last (at most ``POLL_S`` of CPU each). A
process that lives less than ``POLL_S`` may be missed. The slowest tests come from pytest's JUnit report (the
time of each test's setup, call and teardown).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.05
PR_SET_CHILD_SUBREAPER = 36
TICKS = os.sysconf("SC_CLK_TCK")
SLOWEST = 20
SHELLS = frozenset({"sh", "bash", "dash"})
PER_FILE = ("worker", "launcher", "front", "cli")  # the kinds counted per test file as well
# By the command line, first match wins; a process matching none takes an agent parent's kind, else "other".
# A stand-in runtime is a test's script named like the runtime it replaces; the real ones run as modules.
# A group's launcher (ours or plain mlx.launch) loads no model: it starts the ranks, which are workers.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("launcher", ("-m mlx_agent.runtime.distributed.launcher", "bin/mlx.launch")),
    ("worker", ("-m mlx_agent.runtime", "-m mlx_lm.server", "-m mlx_vlm.server")),
    ("front", ("-m mlx_agent.gateway",)),
    ("cli", ("scripts/mlx-agent", "bin/mlx-agent")),
    ("agent", (".cache/agents",)),
    ("stand-in", ("fake_worker", "mlx_lm.server", "mlx_vlm.server")),
    ("checks", ("bin/ruff", "-m mypy", "bin/mypy", "-m compileall")),
    ("pytest", ("-m pytest", "exec(eval(sys.stdin.readline()))")),  # the run and its xdist workers
)


@dataclass
class Proc:
    """One process of the run: its kind and the CPU it was last seen to have used."""

    kind: str
    ppid: int
    cpu_s: float = 0.0
    test_file: str = ""  # the test file named in its environment (pytest's PYTEST_CURRENT_TEST), if any


@dataclass
class Census:
    """The run's processes, by pid and start time (a pid can be reused within one run)."""

    root: int
    procs: dict[tuple[int, int], Proc] = field(default_factory=dict)
    live: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> key of the process living there now

    def kind_of(self, cmdline: str, ppid: int) -> str:
        """Classify a command line; an unclassified process under an agent is the agent's.

        A shell is never a server, though its script may name one (a launcher's wrapper before it execs a rank):
        it counts as other, and as what it runs once it execs (``poll`` reads an other's command line again).
        """
        program = os.path.basename(cmdline.split(" ", 1)[0])
        for kind, marks in () if program in SHELLS else KINDS:
            if any(mark in cmdline for mark in marks):
                return kind
        parent = self.live.get(ppid)
        return "agent" if parent is not None and self.procs[parent].kind == "agent" else "other"

    def provisional(self, proc: Proc) -> bool:
        """Say whether a process's kind may still change: it is read again at every poll while so.

        An other may be a shell or a wrapper (ip netns exec) that has since exec'd the program; a process of its
        parent's kind may be a fork not yet exec'd (a fork shows its parent's command line until it execs: a
        server's child would count as one more server, a test's as one more test runner).
        """
        parent = self.live.get(proc.ppid)
        return proc.kind == "other" or (parent is not None and self.procs[parent].kind == proc.kind)

    def poll(self, seen: set[int]) -> set[int]:
        """Read /proc once: adopt new processes whose parent is the run's, update CPU, reap adopted zombies."""
        now = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        for pid in sorted(now - seen):  # in pid order: a parent is usually seen before its children
            fields = stat(pid)
            if fields is None:
                continue
            ppid = int(fields[1])
            if pid != self.root and ppid not in self.live:
                continue
            key = (pid, int(fields[19]))
            cmdline = read(f"/proc/{pid}/cmdline").replace("\0", " ")
            self.procs[key] = Proc(self.kind_of(cmdline, ppid), ppid, test_file=test_file_of(pid))
            self.live[pid] = key
        for pid, key in list(self.live.items()):
            fields = stat(pid)
            if fields is None or int(fields[19]) != key[1]:
                del self.live[pid]  # gone (its last reading stands)
                continue
            proc = self.procs[key]
            proc.cpu_s = (int(fields[11]) + int(fields[12])) / TICKS
            # A zombie's command line is empty: what it was last read as stands.
            if self.provisional(proc) and (cmdline := read(f"/proc/{pid}/cmdline").replace("\0", " ")):
                proc.kind = self.kind_of(cmdline, proc.ppid)
            if fields[0] == "Z" and int(fields[1]) == os.getpid() and pid != self.root:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)  # an orphan adopted as subreaper: read exactly, now reaped
                del self.live[pid]
        self.reap_untracked()
        return now

    def reap_untracked(self) -> None:
        """Reap every other adopted orphan that has exited (one the census never saw).

        It was too short-lived, or born in another session; left a zombie, it would outlive its killed process
        group, and a test that waits for its group's end would see it as a process still running.
        """
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == self.root:
                return  # nothing waitable, or the run itself, which its Popen waits for
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, os.WNOHANG)


def test_file_of(pid: int) -> str:
    """Return the test file in a process's ``PYTEST_CURRENT_TEST`` ("" if none): the test whose environment it has.

    pytest sets the variable for each test as it runs, and children inherit it: a server a test starts names that
    test; one a shared fixture starts names the test that first asked for it (or the one whose environment the
    fixture copied).
    """
    for entry in read(f"/proc/{pid}/environ").split("\0"):
        if entry.startswith("PYTEST_CURRENT_TEST="):
            return entry.split("=", 1)[1].split("::", 1)[0]
    return ""


def stat(pid: int) -> list[str] | None:
    """Return /proc/PID/stat's fields after the command name (state first), or None if the process is gone."""
    text = read(f"/proc/{pid}/stat")
    return text.rsplit(")", 1)[1].split() if text else None


def read(path: str) -> str:
    """Return a /proc file's text, or "" if the process is gone."""
    try:
        with open(path, "rb") as fh:
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def slowest(junit: Path, count: int = SLOWEST, by_file: bool = False) -> list[tuple[float, str]]:
    """Return the ``count`` longest tests of a JUnit report, longest first; ``by_file``: the longest test files.

    A file's time is its tests' summed: what one xdist worker spends on it (``SLOW_FIRST`` in tests/conftest.py
    sends the longest out first).
    """
    if not junit.is_file() or junit.stat().st_size == 0:
        return []
    cases = ET.parse(junit).getroot().iter("testcase")
    timed: dict[str, float] = {}
    for case in cases:
        name = case.get("classname", "")
        name = name.replace(".", "/") + ".py" if by_file else f"{name}::{case.get('name', '')}"
        timed[name] = timed.get(name, 0.0) + float(case.get("time", 0))
    return sorted(((s, name) for name, s in timed.items()), reverse=True)[:count]


def assert_statements(folder: Path = ROOT / "tests") -> int:
    """Return how many ``assert`` statements the test code holds (test modules and their support modules).

    The issue's measure of test strength across a reshaping of the suite: sharing servers must not lose checks.
    """
    return sum(
        isinstance(node, ast.Assert)
        for path in sorted(folder.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_bytes()))
    )


def run(command: list[str]) -> tuple[int, Census, float]:
    """Run ``command`` under the census; return its exit status, the census and its wall time."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
        print("census: cannot become a subreaper; detached servers may be missed", file=sys.stderr)
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT)
    census = Census(proc.pid)
    done = threading.Event()

    def watch() -> None:
        seen: set[int] = set()
        while not done.is_set():
            seen = census.poll(seen)
            time.sleep(POLL_S)
        census.poll(seen)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rc = proc.wait()
    wall = time.monotonic() - started
    done.set()
    watcher.join()
    return rc, census, wall


def report(
    census: Census, wall: float, tests: list[tuple[float, str]], files: list[tuple[float, str]]
) -> dict[str, object]:
    """Return the census as a document: starts and CPU by kind, totals, the slowest tests."""
    starts = Counter(p.kind for p in census.procs.values())
    cpu: dict[str, float] = {}
    for p in census.procs.values():
        cpu[p.kind] = cpu.get(p.kind, 0.0) + p.cpu_s
    by_file: dict[str, Counter[str]] = {}
    cpu_by_file: dict[str, dict[str, float]] = {}
    for p in census.procs.values():
        if p.kind in PER_FILE:
            by_file.setdefault(p.kind, Counter())[p.test_file or "(none named)"] += 1
            used = cpu_by_file.setdefault(p.kind, {})
            used[p.test_file or "(none named)"] = used.get(p.test_file or "(none named)", 0.0) + p.cpu_s
    return {
        "wall_s": round(wall, 1),
        "assert_statements": assert_statements(),
        "cpu_s": round(sum(cpu.values()), 1),
        "starts": dict(starts.most_common()),
        "cpu_s_by_kind": {kind: round(s, 1) for kind, s in sorted(cpu.items(), key=lambda item: -item[1])},
        "slowest_tests": [{"s": round(s, 2), "test": name} for s, name in tests],
        "slowest_files": [{"s": round(s, 1), "file": name} for s, name in files],
        "server_starts_by_file": {kind: dict(files.most_common()) for kind, files in sorted(by_file.items())},
        # what the processes a file started used, starting and serving: most of a worker's is the work it is given
        "cpu_s_by_file": {
            kind: {name: round(s, 1) for name, s in sorted(files.items(), key=lambda item: -item[1])}
            for kind, files in sorted(cpu_by_file.items())
        },
    }


def main() -> int:
    # The census's own options come first; everything from the first other argument (or after "--") is the run's.
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", type=Path, help="also write the census to this file")
    parser.add_argument("--pytest", action="store_true", help="run pytest ARGS alone (no install, no checks)")
    argv, own = sys.argv[1:], []
    while argv and argv[0] in ("--json", "--pytest", "-h", "--help"):
        own.extend(argv[:2] if argv[0] == "--json" else argv[:1])
        argv = argv[2:] if argv[0] == "--json" else argv[1:]
    options = parser.parse_args(own)
    args = argv[1:] if argv[:1] == ["--"] else argv
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        base = [sys.executable, "-m", "pytest"] if options.pytest else ["bash", "scripts/test"]
        rc, census, wall = run([*base, f"--junitxml={junit}", *args])
        doc = report(census, wall, slowest(junit), slowest(junit, by_file=True))
    usage = resource.getrusage(resource.RUSAGE_SELF)  # the polling's cost, not counted above
    print(f"\ncensus: exit {rc}, {doc['wall_s']} s wall, {doc['cpu_s']} s CPU in {len(census.procs)} processes")
    print(f"assert statements in tests/: {doc['assert_statements']}")
    print(f"(the census itself used {usage.ru_utime + usage.ru_stime:.1f} s CPU reading /proc every {POLL_S} s)")
    starts, cpu = doc["starts"], doc["cpu_s_by_kind"]
    assert isinstance(starts, dict) and isinstance(cpu, dict)
    print(f"{'kind':<8} {'starts':>7} {'CPU s':>8}")
    for kind in cpu:
        print(f"{kind:<8} {starts.get(kind, 0):>7} {cpu[kind]:>8.1f}")
    print(f"\nthe {SLOWEST} slowest tests (s):")
    for test in doc["slowest_tests"]:  # type: ignore[attr-defined]
        print(f"{test['s']:>8.2f}  {test['test']}")
    print(f"\nthe {SLOWEST} slowest test files (s, their tests summed):")
    for file in doc["slowest_files"]:  # type: ignore[attr-defined]
        print(f"{file['s']:>8.1f}  {file['file']}")
    for kind, files in doc["server_starts_by_file"].items():  # type: ignore[attr-defined]
        print(f"\n{kind} starts by test file (the {SLOWEST} that start most):")
        for name, count in list(files.items())[:SLOWEST]:
            print(f"{count:>8}  {name}")
    for kind, files in doc["cpu_s_by_file"].items():  # type: ignore[attr-defined]
        print(f"\n{kind} CPU s by test file (the {SLOWEST} that use most):")
        for name, used in list(files.items())[:SLOWEST]:
            print(f"{used:>8.1f}  {name}")
    if options.json:
        options.json.write_text(json.dumps(doc, indent=2) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
