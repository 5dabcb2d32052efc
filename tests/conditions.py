"""Waiting on conditions instead of sleeping: a poll with a deadline, and the socket states tests wait on.

The socket states are read from Linux's /proc: a process's sockets are those its file descriptors hold (a
connection still in the kernel's accept queue is not yet one of them), and /proc/net/tcp gives each
connection's queues.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil

T = TypeVar("T")
POLL_S = 0.02


def wait_until(check: Callable[[], T], what: str, timeout: float = 30) -> T:
    """Return ``check()`` once it is truthy; fail naming ``what`` (and its last value) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what} (last seen: {value!r})"
        time.sleep(POLL_S)
    return value


def accepted_connections(pid: int, port: int) -> int:
    """Return how many TCP connections to ``port`` the process ``pid`` has accepted and holds open now."""
    return sum(
        1
        for conn in psutil.Process(pid).net_connections("tcp")
        if conn.laddr and conn.laddr.port == port and conn.raddr and conn.status == psutil.CONN_ESTABLISHED
    )


def unread_bytes(pid: int, port: int) -> int:
    """Return the bytes waiting unread in the receive queues of ``pid``'s outgoing connections (not to ``port``)."""
    ends = {
        (conn.laddr.port, conn.raddr.port)
        for conn in psutil.Process(pid).net_connections("tcp")
        if conn.laddr and conn.raddr and conn.laddr.port != port
    }
    unread = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()  # sl local_address rem_address st tx_queue:rx_queue ...
        local, remote = (int(address.split(":")[1], 16) for address in fields[1:3])
        if (local, remote) in ends:
            unread += int(fields[4].split(":")[1], 16)
    return unread
