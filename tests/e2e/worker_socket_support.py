"""A real wrapped mlx_lm worker on its own Unix socket, as a front starts it, and raw HTTP to that socket."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_agent.wire import SOCKET_FLAG
from tests.contract_support import contract

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_S = 120.0  # how long the worker may take to load and listen (a bound, not a measure)
CHAT_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: worker\r\nContent-Type: application/json\r\n"


def is_api_error(answer: object, code: str) -> bool:
    """Say whether ``answer`` is an OpenAI-shaped error object with ``code``."""
    inner = answer.get("error") if isinstance(answer, dict) else None
    return isinstance(inner, dict) and inner.get("code") == code and {"message", "type", "param"} <= set(inner)


@dataclass
class Answer:
    """One HTTP answer read off the socket to its end."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """Return the body as JSON."""
        return json.loads(self.body)


@dataclass
class SocketWorker:
    """A wrapped worker process listening on ``path``."""

    path: str
    process: subprocess.Popen[bytes]
    log_path: Path
    context_window: int

    def connect(self, timeout: float = 60.0) -> socket.socket:
        """Open a raw connection to the worker's socket."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(self.path)
        return sock

    def exchange(self, raw: bytes, timeout: float = 120.0) -> Answer:
        """Send ``raw`` (a whole request), read the answer to the end of the connection and parse it."""
        with self.connect(timeout) as sock:
            sock.sendall(raw)
            return read_answer(sock)

    def post(self, body: Any, path: str = "/v1/chat/completions", raw: bytes | None = None) -> Answer:
        """POST ``body`` (JSON) or ``raw`` bytes with a correct Content-Length, asking to close after the answer.

        ``exchange`` reads to the end of the connection: a keep-alive server (uvicorn's) would hold it open for
        seconds after answering.
        """
        data = raw if raw is not None else json.dumps(body).encode()
        head = f"POST {path} HTTP/1.1\r\nHost: worker\r\nConnection: close\r\nContent-Type: application/json\r\n"
        return self.exchange(head.encode() + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)

    def healthy(self) -> bool:
        """Say whether a short chat is answered 200."""
        return self.post({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).status == 200

    def peak_rss(self) -> int:
        """Return the worker's peak resident memory so far, in bytes (VmHWM)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc status")

    def log(self) -> str:
        """Return the worker's log so far."""
        return self.log_path.read_text(errors="replace")


def read_answer(sock: socket.socket) -> Answer:
    """Read an HTTP answer to the end of the connection and split it into status, headers and body."""
    chunks = []
    while chunk := sock.recv(1 << 16):
        chunks.append(chunk)
    data = b"".join(chunks)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return Answer(status, headers, body)


def closed_by_peer(sock: socket.socket, trickle: bytes, bound_s: float = 60.0) -> bytes | None:
    """Send ``trickle`` a byte every 0.25 s until the worker closes; return what it sent (None: it never closed)."""
    sock.settimeout(0.25)
    received = b""
    deadline = time.monotonic() + bound_s
    sent = 0
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
            if chunk == b"":
                return received
            received += chunk
        except TimeoutError:
            pass
        except OSError:
            return received
        if sent < len(trickle):
            try:
                sock.sendall(trickle[sent : sent + 1])
            except OSError:
                return received
            sent += 1
    return None


@contextmanager
def socket_worker(
    model: Path,
    changes: dict[str, Any] | None = None,
    *,
    context_window: int = 256,
    runtime: str = "mlx_lm",
    extra: tuple[str, ...] = (),
) -> Iterator[SocketWorker]:
    """Start the wrapped worker of ``runtime`` on a private Unix socket, as a front does, and stop it afterwards.

    ``changes`` are fields of its contract (the plain one's otherwise); ``extra`` are more of the entry's arguments.
    """
    changes = dict(changes or {})
    directory = Path(tempfile.mkdtemp(prefix="w", dir="/tmp"))  # AF_UNIX paths are short
    directory.chmod(0o700)
    path = str(directory / "w.sock")
    log_path = directory / "worker.log"
    if runtime == "mlx_lm":
        changes = {"context_window": context_window, **changes}
    generation = ["--max-tokens", "8"] if runtime == "mlx_lm" else []
    argv = [sys.executable, "-m", "mlx_agent.runtime", runtime, "--model", str(model), SOCKET_FLAG, path]
    argv += [*generation, *extra, *contract(**changes)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    with log_path.open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)
    worker = SocketWorker(path, process, log_path, context_window)
    try:
        deadline = time.monotonic() + READY_S
        while True:
            assert process.poll() is None, worker.log()[-3000:]
            try:
                if worker.exchange(b"GET /health HTTP/1.1\r\nHost: w\r\n\r\n", timeout=5).status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.2)
        yield worker
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


SHORT_DEADLINES: dict[str, Any] = {"header_timeout": 2.0, "body_timeout": 3.0}  # contract fields
