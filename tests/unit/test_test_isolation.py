"""Parallel test workers cannot collide: each takes ports from its own block, below the kernel's ephemeral range."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PORT_BLOCK, REPO_ROOT, SLOW_FIRST, suite_order

PICK = "import json; from tests.conftest import free_port; print(json.dumps([free_port() for _ in range(40)]))"


def ports_of(worker: str | None) -> list[int]:
    """Return 40 ports that a fresh test process picks as xdist worker ``worker`` (None: a serial run)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    if worker is not None:
        env["PYTEST_XDIST_WORKER"] = worker
    done = subprocess.run(
        [sys.executable, "-c", PICK], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    ports: list[int] = json.loads(done.stdout)
    return ports


def ephemeral_floor() -> int:
    """Return the lowest port the kernel hands out for port 0 and outgoing connections."""
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text() if sys.platform == "linux" else "49152 65535"
    return int(text.split()[0])


def test_workers_pick_ports_from_disjoint_blocks_below_the_ephemeral_range() -> None:
    """Two workers' ports never meet, each stays in its block, and none is one the kernel may give away."""
    first, second = ports_of("gw0"), ports_of("gw1")
    assert not set(first) & set(second)
    assert all(20000 <= p < 20000 + PORT_BLOCK for p in first)
    assert all(20000 + PORT_BLOCK <= p < 20000 + 2 * PORT_BLOCK for p in second)
    assert max(first + second + ports_of(None)) < ephemeral_floor()
    assert len(set(first)) == len(first)  # one process never hands out a port twice in a row of picks


def test_a_port_in_use_is_skipped() -> None:
    """A port some other process listens on is never returned."""
    import socket

    from tests.conftest import free_port

    taken = free_port()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", taken))
        listener.listen()
        picks = {free_port() for _ in range(PORT_BLOCK)}
    assert taken not in picks


def test_a_run_of_ports_is_consecutive_free_and_inside_the_block() -> None:
    """``free_ports(2)`` (a ring group's two link ports) gives P and P+1, both free, both in this worker's block."""
    from tests.ports import _LOW, free_ports

    for _ in range(PORT_BLOCK):  # a full turn of the block, so a run never crosses its end
        first = free_ports(2)
        assert first >= _LOW and first + 1 < _LOW + PORT_BLOCK


@pytest.mark.fast
def test_the_slow_files_named_for_the_run_order_exist_and_go_first() -> None:
    """Every file the run starts first exists (a rename cannot drop it silently) and sorts before the rest."""
    missing = [path for path in SLOW_FIRST if not (REPO_ROOT / path).is_file()]
    assert not missing
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)
    order = [suite_order(f"{path}::test") for path in (*SLOW_FIRST, "tests/e2e/x.py", "tests/unit/y.py")]
    assert order == sorted(order) and order[len(SLOW_FIRST) - 1] < order[len(SLOW_FIRST)]
