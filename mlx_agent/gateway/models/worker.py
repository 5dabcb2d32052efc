"""One model's worker: spawn it on a private address, wait until it is ready, notice it dying, stop it.

Our wrapped entry listens on a Unix socket inside the front's 0700 socket directory, so no other local user
can reach it or squat its address; a runtime's own server (mlx-vlm, an executable from another environment)
listens on a private loopback port the front picks per load, given in its environment (never its argv), and
answers only the per-launch key the front gives it there and sends with every request. The worker runs in its
own session and process group (``mlx_agent.spawn``), with a parent-death signal on Linux. Liveness is read with
``waitid(WNOWAIT)``: the exited leader stays a zombie, holding its process group id, until ``stop`` has
signalled the whole group and reaped it, so a recycled pid is never signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from mlx_agent.errors import LaunchFailed, MlxAgentError, PortInUse, ReadinessTimeout, from_refusal_lines
from mlx_agent.files import log_tail
from mlx_agent.readiness import Readiness
from mlx_agent.spawn import spawn
from mlx_agent.wire import HOST, PORT_PLACEHOLDER, PROGRESS_ENV, PROMPT_CACHE_PLACEHOLDER, SOCKET_PLACEHOLDER

if TYPE_CHECKING:
    from mlx_agent.records.plan import WorkerRecord

READY_POLL_S = 0.1


def pick_port(host: str = HOST) -> int:
    """Return a loopback port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class WorkerProcess:
    """A spawned worker: its process, its private address, the session that reaches it, and its log."""

    proc: subprocess.Popen[bytes]
    spec: WorkerRecord
    address: str  # the socket path, or the loopback port
    session: aiohttp.ClientSession
    started_at: float = field(default_factory=time.time)
    ready_at: float | None = None
    exit_code: int | None = None
    stopping: bool = False
    progress_path: Path | None = None  # where our entry reports its load and prefill (runtime/serving/progress.py)

    @property
    def pid(self) -> int:
        """Return the worker's pid (also its process group id)."""
        return self.proc.pid

    @property
    def base_url(self) -> str:
        """Return the URL prefix of the worker's endpoints (a Unix socket's host name is a formality)."""
        if self.spec["transport"] == "unix":
            return "http://localhost"
        return f"http://{HOST}:{self.address}"

    @property
    def endpoint(self) -> str | int:
        """Return where to connect: the socket's path, or the loopback port."""
        return self.address if self.spec["transport"] == "unix" else int(self.address)

    @property
    def log_path(self) -> Path:
        """Return the worker's log."""
        return Path(self.spec["log_path"])

    @classmethod
    def spawn(
        cls, spec: WorkerRecord, load_number: int, socket_path: Path | None, prompt_cache: Path | None = None
    ) -> WorkerProcess:
        """Start the worker on a fresh private address, appending to its log (call from the event loop thread).

        ``prompt_cache`` is the directory of the model's kept prompt cache (its identity's).
        """
        if spec["transport"] == "unix":
            assert socket_path is not None
            socket_path.unlink(missing_ok=True)
            address = str(socket_path)
            argv = [arg.replace(SOCKET_PLACEHOLDER, address) for arg in spec["argv"]]
            if prompt_cache is not None:
                argv = [arg.replace(PROMPT_CACHE_PLACEHOLDER, str(prompt_cache)) for arg in argv]
            connector: aiohttp.BaseConnector = aiohttp.UnixConnector(path=address, limit=0, force_close=True)
            where = f"unix socket {address}"
        else:
            address = str(pick_port())
            argv = [arg.replace(PORT_PLACEHOLDER, address) for arg in spec["argv"]]  # a runtime's own module
            connector = aiohttp.TCPConnector(limit=0, force_close=True)
            where = f"{HOST}:{address}"
        env, headers = dict(spec["env"]), {}
        progress = None if socket_path is None or spec["transport"] != "unix" else socket_path.with_suffix(".progress")
        if progress is not None:  # our own entry, in the front's private directory
            progress.unlink(missing_ok=True)
            env[PROGRESS_ENV] = str(progress)
        if port_env := spec.get("port_env"):  # the native entry appends --port from here: no port in any argv
            env[port_env] = address
        if spec["secret_env"]:  # a TCP worker any local process could reach: it answers only this launch's key
            key = secrets.token_urlsafe(32)
            env[spec["secret_env"]] = key
            headers["Authorization"] = f"Bearer {key}"
        proc = spawn(
            argv,
            env,
            Path(spec["log_path"]),
            spec["cwd"],
            die_with_parent=True,
            header=f"mlx-agent front: worker load {load_number} on {where}",
            executable=spec.get("executable"),  # the file reviewed, not whatever argv[0]'s links name now
        )
        session = aiohttp.ClientSession(connector=connector, auto_decompress=False, headers=headers)
        return cls(proc=proc, spec=spec, address=address, session=session, progress_path=progress)

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

    def start_failure(self, code: int) -> MlxAgentError:
        """Return the error of a worker that exited before it was ready: its own refusal, or ``launch_failed``."""
        tail = log_tail(self.log_path, 60)
        details = {"exit_code": code, "log_path": str(self.log_path), "log_tail": tail[-20:]}
        reported = from_refusal_lines(tail, details)
        if reported is not None:
            return reported
        return LaunchFailed(f"the worker exited with status {code} before it was ready", details=details)

    async def wait_ready(self) -> None:
        """Return once the worker answers its readiness check; raise its launch error if it exits or is slow."""
        check = Readiness(self.spec["readiness"])
        deadline = time.monotonic() + self.spec["ready_timeout"]
        while True:
            code = self.exited()
            if code is not None:
                raise self.start_failure(code)
            if await self._probe(check):
                self._refuse_a_stranger()
                self.ready_at = time.time()
                return
            if time.monotonic() >= deadline:
                raise ReadinessTimeout(
                    f"the worker was not ready within {self.spec['ready_timeout']:g} s",
                    details={
                        "ready_timeout": self.spec["ready_timeout"],
                        "log_path": str(self.log_path),
                        "log_tail": log_tail(self.log_path),
                    },
                )
            await asyncio.sleep(READY_POLL_S)

    def _refuse_a_stranger(self) -> None:
        """Refuse a TCP port that answered but that the worker does not listen on: another program took it.

        The front picks the port a moment before the worker binds it, and any local process could bind it first
        and answer as a ready worker; requests would then go to it. A Unix socket in the front's private
        directory cannot be taken, so only TCP workers are checked.
        """
        if self.spec["transport"] == "unix" or self.listens(int(self.address)):
            return
        raise PortInUse(
            f"port {self.address} answered, but not from the worker (pid {self.pid}): another program took it; "
            "nothing was sent to it",
            details={"port": int(self.address), "worker_pid": self.pid},
        )

    def listens(self, port: int) -> bool:
        """Say whether the worker (or a process it started) listens on loopback ``port``."""
        import psutil

        try:
            root = psutil.Process(self.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return False
        for proc in tree:
            try:
                connections = proc.net_connections(kind="tcp")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in connections):
                return True
        return False

    async def _probe(self, check: Readiness) -> bool:
        timeout = aiohttp.ClientTimeout(total=check.timeout)
        body = check.body()
        try:
            async with self.session.request(
                check.method,
                self.base_url + check.path,
                data=body,
                timeout=timeout,
                headers={"Content-Type": "application/json"} if body else None,
            ) as resp:
                return check.matches(resp.status, await resp.read())
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False

    async def stop(self, grace: float | None = None) -> str:
        """TERM the worker's group, wait up to ``grace`` s (its plan's), KILL what is left, reap; say how it ended."""
        grace = self.spec["stop_timeout"] if grace is None else grace
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
        await self.session.close()
        self._forget_socket()
        return how

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def _forget_socket(self) -> None:
        if self.spec["transport"] == "unix":
            Path(self.address).unlink(missing_ok=True)
        if self.progress_path is not None:
            self.progress_path.unlink(missing_ok=True)

    def kill_now(self) -> None:
        """KILL the worker's group and reap it, synchronously (the front is exiting or the load was abandoned)."""
        self.stopping = True
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            self.proc.wait()
        self._forget_socket()


# mlx.launch's last lines ("Node with rank R was killed / exited with code C") and our launcher's
# ("rank R exited with status S", for each rank that ended on its own).
RANK_EXIT = re.compile(
    r"Node with rank (\d+) (?:was (killed)|exited with code (-?\d+))|launcher: rank (\d+) exited with status (\d+)"
)


def rank_exits(lines: list[str]) -> list[dict[str, Any]]:
    """Return how each rank of a group ended, from its launcher's log; empty for a worker that is no group."""
    ended: dict[int, dict[str, Any]] = {}
    for line in lines:
        if match := RANK_EXIT.search(line):
            if match.group(4) is not None:  # our launcher's own line: the rank ended by itself
                rank, code = int(match.group(4)), int(match.group(5))
                ended[rank] = {"rank": rank, "killed": code > 128, "exit_code": code}
            else:
                rank = int(match.group(1))
                exit_code = None if match.group(3) is None else int(match.group(3))
                ended.setdefault(rank, {"rank": rank, "killed": exit_code is None, "exit_code": exit_code})
    return sorted(ended.values(), key=lambda r: (not r["killed"], r["rank"]))
