"""Per-port advisory locks that serialise confirm, stop, unload and policy on one port."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlx_agent.errors import MlxAgentError
from mlx_agent.errors.commands import LockTimeout
from mlx_agent.files import open_private, private_dir
from mlx_agent.port_files import PortFiles


@contextmanager
def file_lock(path: Path, *, timeout: float, busy: MlxAgentError, remove: bool = False) -> Iterator[None]:
    """Hold the exclusive lock of the file ``path`` for the block, or raise ``busy`` after ``timeout`` seconds.

    With ``remove`` the lock file is removed when the block ends, while it is still held. A lock is held only
    once the file locked is still the one at ``path``: a waiter that locks a file removed meanwhile opens the
    path again, so two commands never hold two files of one lock.
    """
    private_dir(path.parent)
    deadline = time.monotonic() + timeout
    while True:
        fd = open_private(path, os.O_RDWR | os.O_CREAT)  # a link planted at the lock's path is refused
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise busy from None
                    time.sleep(0.05)
            if _same_file(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # it was removed while we waited: lock the file at the path now
    try:
        yield
    finally:
        if remove:
            path.unlink(missing_ok=True)
        os.close(fd)  # closing the descriptor releases the lock


def _same_file(fd: int, path: Path) -> bool:
    """Say whether the open file ``fd`` is still the file at ``path``."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


@contextmanager
def port_lock(directory: Path, port: int, *, timeout: float, busy: type[MlxAgentError] = LockTimeout) -> Iterator[None]:
    """Hold the exclusive lock of ``port`` for the block, or raise ``busy`` after ``timeout`` seconds."""
    error = busy(f"another mlx-agent command holds the lock of port {port}", details={"port": port})
    with file_lock(PortFiles(directory, port).lock, timeout=timeout, busy=error):
        yield
