"""Free space where mlx-agent writes (standard library only): the floor below which a disk counts as full.

Every process asks the same questions here: the CLI's ``serve status``, the front (``/health``, and whether a
worker that stopped answering did so because its disk filled), and the worker saving its prompt cache.

* The **floor** of a file system is ``max(8 MiB, min(1 GiB, 1% of its size))``: below it the disk is reported
  full (``disk_full`` in status, health and a failed request's error), and no prompt-cache entry is saved
  that would take the free space under it. Logs, receipts and policy changes need the room that is left.
* A server whose places (``server_places``: its state directory, each worker's log directory and prompt-cache
  root) are under their floor still starts and serves, **degraded**: its ``/health`` says ``"status":
  "degraded"`` with ``"ready": true``, which readiness accepts, and ``serve start`` says so at once, in the
  preview's warnings and the confirm's (``floor_warnings``: the path, its free bytes and the floor). It is
  not refused: a home smaller than the floor (a 3 MB disk, whose floor is 8 MiB) runs a server whose logs and
  receipts need kilobytes; only the prompt cache, which needs room, saves nothing there.
* The kept prompt cache's **effective limit** is ``min(--prompt-cache-disk-gb, half of (free + kept))``,
  where ``kept`` is what its saved entries already take: the cache never takes more than half of the space
  it could use, and shrinks with the disk. It is computed when a worker starts and when it saves (the plan
  holds the configured limit only, so it stays deterministic).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

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


def server_places(state_dir: Path | str, models: Sequence[Mapping[str, Any]]) -> list[tuple[str, Path]]:
    """Return where a server writes, by role: its state directory, each worker's log directory, each cache root.

    The first two are ``state``, a prompt-cache root ``prompt_cache``; ``models`` are a plan's or a front
    config's (both hold ``worker.log_path`` and ``prompt_cache``).
    """
    places = [("state", Path(state_dir))]
    for model in models:
        places.append(("state", Path(model["worker"]["log_path"]).parent))
        if model.get("prompt_cache") is not None:
            places.append(("prompt_cache", Path(model["prompt_cache"]["root"])))
    return places


def floor_warnings(places: list[tuple[str, Path]]) -> list[str]:
    """Return one warning per file system among ``places`` that is under its floor (the first path names it)."""
    return [
        f"disk_full: {space.path} has {space.free_bytes} bytes free, under its floor of {space.floor_bytes} bytes; "
        "the server starts and answers, but reports itself degraded (/health, serve status) and saves no prompt "
        "cache there until space is freed"
        for space in disks([path for _, path in places])
        if space.low
    ]
