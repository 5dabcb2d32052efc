"""Per-port advisory locks that serialise confirm, stop, unload and policy on one port."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlx_agent.errors import LockTimeout, MlxAgentError
from mlx_agent.files import open_private, private_dir


@contextmanager
def file_lock(path: Path, *, timeout: float, busy: MlxAgentError) -> Iterator[None]:
    """Hold the exclusive lock of the file ``path`` for the block, or raise ``busy`` after ``timeout`` seconds."""
    private_dir(path.parent)
    fd = open_private(path, os.O_RDWR | os.O_CREAT)  # a link planted at the lock's path is refused
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise busy from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextmanager
def port_lock(directory: Path, port: int, *, timeout: float, busy: type[MlxAgentError] = LockTimeout) -> Iterator[None]:
    """Hold the exclusive lock of ``port`` for the block, or raise ``busy`` after ``timeout`` seconds."""
    error = busy(f"another mlx-agent command holds the lock of port {port}", details={"port": port})
    with file_lock(directory / f"{port}.lock", timeout=timeout, busy=error):
        yield
