"""A native worker's connections that have not proved the key: closed by a deadline, bounded in number.

The worker is the native entry over a threading ``http.server`` script (what mlx_lm.server is), under an
interpreter that cannot import mlx_agent; the clients are raw sockets that send part of a request and then
nothing, or a byte at a time, as another local user holding the worker's threads would.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from mlx_agent.runtime.entries import native_entry
from tests.conftest import free_port
from tests.integration.native_support import SERVER, get

KEY = "k" * 32
BOUND_S = 60.0  # how long a test waits for what must happen (a bound on a hang, not a measure)


@dataclass
class Worker:
    """A native worker process on a loopback port."""

    port: int
    process: subprocess.Popen[str]

    def threads(self) -> int:
        """Return how many threads the worker process runs now."""
        count: int = psutil.Process(self.process.pid).num_threads()
        return count

    def keyed(self) -> tuple[int, bytes]:
        """Send a request with the key; return its status and body."""
        return get(self.port, {"Authorization": f"Bearer {KEY}"})


@contextmanager
def native_worker(tmp_path: Path, preauth_s: float) -> Iterator[Worker]:
    """Run the native entry (stdlib only) over the threading script with a pre-auth deadline of ``preauth_s``."""
    script = tmp_path / "server.py"
    script.write_text(SERVER, encoding="utf-8")
    port = free_port()
    env = {
        **os.environ,
        native_entry.PORT_ENV: str(port),
        native_entry.KEY_ENV: KEY,
        native_entry.PREAUTH_TIMEOUT_ENV: str(preauth_s),
    }
    argv = [sys.executable, "-S", "-I", native_entry.__file__, str(script)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        worker = Worker(port, proc)
        assert worker.keyed() == (200, b"ok")  # it listens
        yield worker
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def closed_by_peer(sock: socket.socket, trickle: bytes = b"") -> bool:
    """Wait (up to ``BOUND_S``) for the peer to close ``sock``, sending ``trickle`` a byte at a time meanwhile."""
    sock.settimeout(0.25)
    deadline = time.monotonic() + BOUND_S
    sent = 0
    while time.monotonic() < deadline:
        try:
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            pass
        except OSError:  # reset: closed as well
            return True
        if sent < len(trickle):
            try:
                sock.sendall(trickle[sent : sent + 1])
            except OSError:
                return True
            sent += 1
    return False


def test_a_connection_that_never_proves_the_key_is_closed_at_its_deadline(tmp_path: Path) -> None:
    """Idle and byte-at-a-time pre-auth connections are closed by the deadline; a keyed request is still served."""
    with native_worker(tmp_path, preauth_s=1.0) as worker:
        idle = socket.create_connection(("127.0.0.1", worker.port))
        slow = socket.create_connection(("127.0.0.1", worker.port))
        with idle, slow:
            idle.sendall(b"GET /health HTTP/1.1\r\n")  # headers started, never finished
            # One byte every 0.25 s, each inside any per-read timeout: only a deadline on the whole closes it.
            assert closed_by_peer(slow, trickle=b"GET /health HTTP/1.1\r\nHost: x\r\nX-Filler: " + b"a" * 400)
            assert closed_by_peer(idle)
        assert worker.keyed() == (200, b"ok")


def test_pre_auth_connections_are_bounded_and_the_keyed_request_is_served(tmp_path: Path) -> None:
    """Twice the bound of held pre-auth connections: the worker's threads stay bounded, the key gets through."""
    held = 2 * native_entry.MAX_PREAUTH
    with native_worker(tmp_path, preauth_s=BOUND_S * 2) as worker, ExitStack() as stack:
        base = worker.threads()
        for _ in range(held):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", worker.port)))
            sock.sendall(b"GET /health HTTP/1.1\r\n")
        assert worker.keyed() == (200, b"ok")
        deadline = time.monotonic() + BOUND_S
        while worker.threads() > base + native_entry.MAX_PREAUTH + 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert worker.threads() <= base + native_entry.MAX_PREAUTH + 2, worker.threads()
        conn = http.client.HTTPConnection("127.0.0.1", worker.port, timeout=30)
        conn.request("GET", "/health", headers={"Authorization": f"Bearer {KEY}"})
        assert conn.getresponse().status == 200
        conn.close()
