"""Free space where mlx-agent writes (standard library only): the floor below which a disk counts as full.

Every process asks the same questions here: the CLI's ``serve status``, the front (``/health``, and whether a
worker that stopped answering did so because its disk filled), and the worker saving its prompt cache.

* The **floor** of a file system is ``max(8 MiB, min(1 GiB, 1% of its size))``: below it the disk is reported
  full (``disk_full`` in status, health and a failed request's error), and no prompt-cache entry is saved
  that would take the free space under it. Logs, receipts and policy changes need the room that is left.
* The kept prompt cache's **effective limit** is ``min(--prompt-cache-disk-gb, half of (free + kept))``,
  where ``kept`` is what its saved entries already take: the cache never takes more than half of the space
  it could use, and shrinks with the disk. It is computed when a worker starts and when it saves (the plan
  holds the configured limit only, so it stays deterministic).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

MIB = 1024 * 1024
FLOOR_MIN_BYTES = 8 * MIB
FLOOR_MAX_BYTES = 1024 * MIB
FLOOR_SHARE = 0.01  # of the file system's size, between the two bounds above
CACHE_SHARE = 0.5  # of free + kept: what the kept prompt cache may take at most
FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


def floor_bytes(total_bytes: int) -> int:
    """Return the free-space floor of a file system of ``total_bytes``."""
    return max(FLOOR_MIN_BYTES, min(FLOOR_MAX_BYTES, int(total_bytes * FLOOR_SHARE)))


def cache_limit(configured_bytes: int, free_bytes: int, kept_bytes: int) -> int:
    """Return the kept prompt cache's effective limit: the configured one, held to a share of the usable space."""
    return max(0, min(configured_bytes, int(CACHE_SHARE * (max(0, free_bytes) + max(0, kept_bytes)))))


def room_for(free_bytes: int, floor: int, size: int) -> bool:
    """Say whether writing ``size`` bytes leaves at least ``floor`` free of ``free_bytes``."""
    return free_bytes - size >= floor


def is_full(exc: BaseException) -> bool:
    """Say whether an error is a full disk or quota (mlx's write errors carry no errno: ask ``disk_space`` then)."""
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


class DiskSpace:
    """The free space of the file system holding ``path``, as this user may use it.

    A plain class, not a dataclass: ``serve status`` reads these, and importing dataclasses (and the inspect, ast
    and dis modules it brings) was a fifth of that command's start-up.
    """

    __slots__ = ("device", "free_bytes", "path", "total_bytes")

    def __init__(self, path: str, free_bytes: int, total_bytes: int, device: int) -> None:
        self.path = path  # the directory asked about
        self.free_bytes = free_bytes  # statvfs f_bavail: what an unprivileged writer can still use
        self.total_bytes = total_bytes
        self.device = device  # st_dev of the nearest existing directory: places on one file system report once

    def __repr__(self) -> str:
        return f"DiskSpace({self.path!r}, free_bytes={self.free_bytes}, total_bytes={self.total_bytes})"

    @property
    def floor_bytes(self) -> int:
        """Return this file system's floor."""
        return floor_bytes(self.total_bytes)

    @property
    def low(self) -> bool:
        """Say whether the free space is under the floor."""
        return self.free_bytes < self.floor_bytes

    def to_json(self) -> dict[str, object]:
        """Return what status shows of it."""
        return {
            "path": self.path,
            "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes,
            "floor_bytes": self.floor_bytes,
            "low": self.low,
        }

    def describe(self) -> str:
        """Return one phrase for messages: ``/home/u/.mlx-agent has 3.1 MiB free (floor 8.0 MiB)``."""
        return f"{self.path} has {self.free_bytes / MIB:.1f} MiB free (floor {self.floor_bytes / MIB:.1f} MiB)"


def disk_space(path: Path | str) -> DiskSpace | None:
    """Return the free space where ``path`` is (or would be: its nearest existing parent), or None if unreadable."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
        device = os.stat(probe).st_dev
    except OSError:
        return None
    return DiskSpace(str(path), st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize, device)


def disks(paths: list[Path | str]) -> list[DiskSpace]:
    """Return the free space of each file system among ``paths`` once (the first path names it)."""
    seen: dict[int, DiskSpace] = {}
    for path in paths:
        space = disk_space(path)
        if space is not None and space.device not in seen:
            seen[space.device] = space
    return list(seen.values())
