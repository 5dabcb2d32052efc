"""The one model worker: spawn it on a private loopback port, wait until it is ready, notice it dying, stop it.

The worker runs in its own session and process group, stdout and stderr appended to its log. On Linux it
also gets a parent-death signal, so a gateway killed with SIGKILL does not leave a loaded model behind.
Liveness is read with ``waitid(WNOWAIT)``: the exited leader stays a zombie, holding its process group id,
until ``stop`` has signalled the whole group and reaped it, so a recycled pid is never signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from mlx_agent.gateway.config import WorkerSpec

READY_POLL_S = 0.1
STOP_GRACE_S = 5.0


class WorkerStartError(Exception):
    """The worker exited or stayed unready; ``code`` is ``launch_failed`` or ``readiness_timeout``."""

    def __init__(self, code: str, message: str, details: dict[str, object]) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details


def pick_port(host: str = "127.0.0.1") -> int:
    """Return a loopback port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


# Run first in the worker's own, single-threaded process (no preexec_fn in the threaded gateway): ask Linux
# to KILL it when the gateway dies, give up if the gateway is already gone, then exec the real worker.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def launch_argv(argv: list[str]) -> list[str]:
    """Return the argv that starts ``argv`` so that, on Linux, it dies with the gateway."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *argv]


@dataclass
class WorkerProcess:
    """A spawned worker: its process, private port and log."""

    proc: subprocess.Popen[bytes]
    port: int
    spec: WorkerSpec
    host: str = "127.0.0.1"
    started_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    exit_code: int | None = None
    stopping: bool = False

    @property
    def pid(self) -> int:
        """Return the worker's pid (also its process group id)."""
        return self.proc.pid

    @property
    def base_url(self) -> str:
        """Return the worker's private base URL."""
        return f"http://{self.host}:{self.port}"

    @classmethod
    def spawn(cls, spec: WorkerSpec, load_number: int) -> WorkerProcess:
        """Start the worker on a fresh private port, appending to its log (call from the event loop thread)."""
        port = pick_port()
        argv = spec.argv_for(port)
        spec.log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(spec.log_path, "ab") as log:
            os.fchmod(log.fileno(), 0o600)
            log.write(f"mlx-agent gateway: worker load {load_number} on 127.0.0.1:{port}\n".encode())
            log.flush()
            # Linux ties the parent-death signal to the forking thread: spawn from the loop's, not an executor.
            proc = subprocess.Popen(launch_argv(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **spec.env}, cwd=spec.cwd, start_new_session=True)
        return cls(proc=proc, port=port, spec=spec)

    def exited(self) -> int | None:
        """Return the exit status if the worker has ended (without reaping it), else None."""
        if self.exit_code is not None:
            return self.exit_code
        if self.proc.returncode is not None:
            self.exit_code = self.proc.returncode
            return self.exit_code
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            self.exit_code = self.proc.poll() if self.proc.returncode is None else self.proc.returncode
            return self.exit_code if self.exit_code is not None else -1
        if info is None:
            return None
        self.exit_code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        return self.exit_code

    async def wait_ready(self, session: aiohttp.ClientSession) -> None:
        """Return once the worker answers its readiness check; raise ``WorkerStartError`` if it exits or is slow."""
        from mlx_agent.files import log_tail

        readiness = self.spec.readiness
        url = self.base_url + readiness["path"]
        deadline = time.monotonic() + self.spec.ready_timeout_s
        while True:
            code = self.exited()
            if code is not None:
                raise WorkerStartError("launch_failed", f"the worker exited with status {code} before it was ready",
                                       {"exit_code": code, "log_path": str(self.spec.log_path),
                                        "log_tail": log_tail(self.spec.log_path)})
            if await self._probe(session, url, readiness):
                self.ready_at = time.time()
                return
            if time.monotonic() >= deadline:
                raise WorkerStartError("readiness_timeout",
                                       f"the worker was not ready within {self.spec.ready_timeout_s:g} s",
                                       {"ready_timeout_s": self.spec.ready_timeout_s,
                                        "log_path": str(self.spec.log_path),
                                        "log_tail": log_tail(self.spec.log_path)})
            await asyncio.sleep(READY_POLL_S)

    @staticmethod
    async def _probe(session: aiohttp.ClientSession, url: str, readiness: dict[str, Any]) -> bool:
        """Say whether the worker answers its readiness check (the same rules as ``supervise.readiness``)."""
        timeout = aiohttp.ClientTimeout(total=readiness.get("timeout_s", 2))
        post = readiness.get("post")
        try:
            request = session.get(url, timeout=timeout) if post is None else \
                session.post(url, json=post, timeout=timeout)
            async with request as resp:
                body = await resp.read()
                if resp.status != readiness.get("status", 200):
                    return False
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False
        expected = readiness.get("json") or {}
        nonnull = readiness.get("nonnull") or []
        if not expected and not nonnull:
            return True
        try:
            data = json.loads(body)
        except ValueError:
            return False
        return (isinstance(data, dict) and all(data.get(k) == v for k, v in expected.items())
                and all(data.get(k) is not None for k in nonnull))

    async def stop(self, grace: float = STOP_GRACE_S) -> str:
        """TERM the worker's group, wait up to ``grace`` s, KILL what is left, reap; return how it ended."""
        self.stopping = True
        how = "exited"
        if self.exited() is None:
            how = "terminated"
            self._signal_group(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.exited() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if self.exited() is None:
                how = "killed"
        # The leader is a zombie (or alive): its pgid cannot have been recycled, so the group is still ours.
        self._signal_group(signal.SIGKILL)
        while self.exited() is None:
            await asyncio.sleep(0.05)
        self.proc.wait()
        return how

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def kill_now(self) -> None:
        """KILL the worker's group and reap it, synchronously (the gateway is exiting)."""
        self.stopping = True
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            self.proc.wait()
