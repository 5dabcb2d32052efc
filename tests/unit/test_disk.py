"""The free-space floor and the kept prompt cache's effective limit: the arithmetic of ``mlx_agent.disk``."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from mlx_agent.disk import (
    FLOOR_MAX_BYTES,
    FLOOR_MIN_BYTES,
    MIB,
    DiskSpace,
    cache_limit,
    disk_space,
    disks,
    floor_bytes,
    is_full,
    room_for,
    server_places,
)

pytestmark = pytest.mark.fast

GB = 10**9


@pytest.mark.parametrize(
    ("total", "floor"),
    [
        (3 * MIB, FLOOR_MIN_BYTES),  # a tiny disk: the floor is never under 8 MiB
        (0, FLOOR_MIN_BYTES),
        (100 * GB, GB),  # 1% of it
        (250 * GB, FLOOR_MAX_BYTES),  # 1% would be 2.5 GB: held to 1 GiB
        (4000 * GB, FLOOR_MAX_BYTES),
    ],
)
def test_the_floor_is_a_share_of_the_disk_between_its_bounds(total: int, floor: int) -> None:
    """The floor is 1% of the file system, never under 8 MiB nor over 1 GiB."""
    assert floor_bytes(total) == floor


@pytest.mark.parametrize(
    ("configured", "free", "kept", "limit"),
    [
        (4 * GB, 500 * GB, 0, 4 * GB),  # room to spare: the configured limit holds
        (4 * GB, 3 * MIB, 0, int(1.5 * MIB)),  # a 3 MB home: half of it, not 4 GB
        (4 * GB, 1 * GB, 1 * GB, 1 * GB),  # what the cache already holds counts as usable space
        (4 * GB, 0, 2 * GB, 1 * GB),  # a full disk halves a cache that filled it
        (4 * GB, -5, 0, 0),  # a negative reading is no space
    ],
)
def test_the_cache_limit_is_held_to_half_the_space_it_could_use(
    configured: int, free: int, kept: int, limit: int
) -> None:
    """The effective limit is the configured one, or half of free plus kept where that is less."""
    assert cache_limit(configured, free, kept) == limit


def test_an_entry_fits_only_if_the_floor_stays_free() -> None:
    """A write of N bytes is allowed only while free minus N stays at or above the floor."""
    assert room_for(10 * MIB, 8 * MIB, 2 * MIB)
    assert not room_for(10 * MIB, 8 * MIB, 2 * MIB + 1)
    assert not room_for(0, 8 * MIB, 0)


def test_a_full_disk_is_told_by_its_errno() -> None:
    """ENOSPC and EDQUOT are a full disk; another error, or an errno-less one, is not."""
    assert is_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_full(RuntimeError("[write] Unable to write 195297 bytes to file."))


def test_a_disk_below_its_floor_is_low() -> None:
    """A file system whose free space is under its floor reports low, and its JSON carries the numbers."""
    low = DiskSpace("/h", free_bytes=3 * MIB, total_bytes=16 * MIB, device=1)
    assert low.low and low.to_json() == {
        "path": "/h",
        "free_bytes": 3 * MIB,
        "total_bytes": 16 * MIB,
        "floor_bytes": FLOOR_MIN_BYTES,
        "low": True,
    }
    assert "3.0 MiB free (floor 8.0 MiB)" in low.describe()
    assert not DiskSpace("/h", free_bytes=FLOOR_MIN_BYTES, total_bytes=16 * MIB, device=1).low


def test_a_path_not_made_yet_reports_its_nearest_parent(tmp_path: Path) -> None:
    """A directory that does not exist yet (a cache never saved) reports the file system it would be on."""
    space = disk_space(tmp_path / "prompt-cache" / "abc")
    assert space is not None and space.path == str(tmp_path / "prompt-cache" / "abc")
    assert space.total_bytes > 0 and 0 <= space.free_bytes <= space.total_bytes


def test_places_on_one_file_system_report_once(tmp_path: Path) -> None:
    """Two directories of one file system give one entry, named by the first."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    found = disks([tmp_path / "a", tmp_path / "b"])
    assert [d.path for d in found] == [str(tmp_path / "a")]


def test_a_servers_places_are_its_state_its_worker_logs_and_its_caches(tmp_path: Path) -> None:
    """A plan's or a front's places: the state directory, each worker's log directory, each prompt-cache root."""
    models: list[dict[str, object]] = [
        {"worker": {"log_path": str(tmp_path / "serve" / "8080.worker.log")}, "prompt_cache": None},
        {"worker": {"log_path": "/logs/w1.log"}, "prompt_cache": {"root": "/cache"}},
    ]
    assert server_places(tmp_path / "serve", models) == [
        ("state", tmp_path / "serve"),
        ("state", tmp_path / "serve"),
        ("state", Path("/logs")),
        ("prompt_cache", Path("/cache")),
    ]
