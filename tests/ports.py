"""Loopback ports for tests: each pytest-xdist worker has its own block, below the kernel's ephemeral range.

The kernel hands out ports from 32768 up on Linux (49152 on macOS) for port 0 and for every outgoing
connection, and the product's own port picks land there too (but a ring group's links: 10000-19999, below the
blocks); a port a test chose from its worker's block cannot be chosen by a test on another worker, nor taken by a
connection, before its server binds it.
"""

from __future__ import annotations

import itertools
import os
import random

from mlx_agent.supervise.ports import port_is_free

PORT_BLOCK = 1500
FIRST = 20000
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 8
_LOW = FIRST + _WORKER * PORT_BLOCK
_PORTS = itertools.cycle(range(_LOW, _LOW + PORT_BLOCK))
for _ in range(random.randrange(PORT_BLOCK)):  # a run started right after another does not reuse its ports first
    next(_PORTS)


def free_ports(count: int, host: str = "127.0.0.1") -> int:
    """Return the first of ``count`` consecutive ports of this worker's block that are all free now."""
    for _ in range(PORT_BLOCK):
        first = next(_PORTS)
        run = range(first, first + count)
        if run[-1] < _LOW + PORT_BLOCK and all(port_is_free(port, host) for port in run):
            for _ in range(count - 1):
                next(_PORTS)
            return first
    raise RuntimeError(f"no {count} consecutive free ports in this worker's block of {PORT_BLOCK}")


def free_port(host: str = "127.0.0.1") -> int:
    """Return a loopback port that is free now, from this test worker's own block of ports."""
    return free_ports(1, host)
