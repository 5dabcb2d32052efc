"""Per-port advisory locks that serialise confirm, stop, unload and policy on one port."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlx_agent.errors import LockTimeout, MlxAgentError


@contextmanager
def port_lock(directory: Path, port: int, *, timeout: float,
              busy: type[MlxAgentError] = LockTimeout) -> Iterator[None]:
    """Hold the exclusive lock of ``port`` for the block, or raise ``busy`` after ``timeout`` seconds."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(directory / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise busy(f"another mlx-agent command holds the lock of port {port}",
                               details={"port": port}) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
