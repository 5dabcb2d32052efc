"""The private temp directory of a front's worker sockets, for serve dirs whose path is too long for a socket.

Every such directory lives under one per-user root (``<tmp>/mlx-agent-<uid>``, 0700) and holds a lock file its
front keeps locked for its life. A front killed with SIGKILL cannot remove its directory, but its lock dies
with it, so the next front to start removes every directory whose lock it can take: dead fronts' directories
are bounded by one, and a live front's (in any PID namespace) is never touched. When the root is unsafe
(another user's, a link), the front falls back to a lone ``mkdtemp`` directory, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from mlx_agent.errors import StateDirUnsafe
from mlx_agent.files import closed_dir, open_private

LOCK = ".front.lock"


def _locked(path: Path, create: bool = False) -> int:
    """Open and lock ``path``'s lock file without waiting; return the descriptor (OSError when held)."""
    fd = open_private(path / LOCK, os.O_RDWR | (os.O_CREAT if create else 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    return fd


def _sweep(root: Path) -> None:
    """Remove the directories of fronts that are gone: those whose lock nobody holds."""
    for entry in root.iterdir():
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue  # a dot name is a front's directory not yet locked (see TempSocketDir)
        try:
            fd = _locked(entry)
        except FileNotFoundError:
            fd = -1  # no lock file: made by hand, never a front's (a front's is locked before its rename)
        except (OSError, StateDirUnsafe):
            continue  # held (a live front's), or a lock file that is not one
        shutil.rmtree(entry, ignore_errors=True)
        if fd >= 0:
            os.close(fd)


class TempSocketDir:
    """A front's own socket directory under the per-user root, locked while the front lives."""

    def __init__(self) -> None:
        self._fd = -1
        try:
            root = closed_dir(Path(tempfile.gettempdir()) / f"mlx-agent-{os.getuid()}")
        except StateDirUnsafe:
            self.path = Path(tempfile.mkdtemp(prefix="mlx-agent-"))
            return
        # Made under a dot name that sweeps skip, locked, then renamed (the lock stays with the directory):
        # another front's sweep never sees this one unlocked.
        staging = Path(tempfile.mkdtemp(prefix=".new-", dir=root))
        self._fd = _locked(staging, create=True)
        self.path = root / f"{os.getpid()}-{staging.name.removeprefix('.new-')}"
        staging.rename(self.path)
        with contextlib.suppress(OSError):
            _sweep(root)

    def close(self) -> None:
        """Remove the directory and release its lock."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
