"""Saving the kept prompt cache on a small real disk (a tmpfs): it stops at the floor and never leaves a half file.

The entries are real mlx arrays written by mlx_lm's ``save_prompt_cache``; the disks are real tmpfs mounts
(root only, as ``tests/integration/test_hostile_machine.small_disk``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache

from mlx_agent.disk import MIB, DiskSpace, disk_space
from mlx_agent.runtime.serving import prompt_cache
from mlx_agent.runtime.serving.cache_entry_check import entry_name
from mlx_agent.runtime.serving.prompt_cache import AlignedPromptCache, fit_to_disk, keep_entries, save_entries
from mlx_agent.wire import PROMPT_CACHE_REPORT
from tests.disk_support import tmpfs

POSITIONS = 600  # one entry: keys and values of 2 heads x 600 positions x 64 dims in float32, about 600 KiB


def fill_to(directory: Path, free_bytes: int) -> None:
    """Write zeros into ``directory`` until about ``free_bytes`` are left free."""
    space = disk_space(directory)
    assert space is not None
    with open(directory / "filler", "wb") as fh:
        fh.write(b"\0" * max(0, space.free_bytes - free_bytes))


def store_of(count: int) -> AlignedPromptCache:
    """Return a prompt cache holding ``count`` distinct entries of about 600 KiB each."""
    store = AlignedPromptCache(max_size=count + 1)
    for first in range(count):
        layer = KVCache()  # type: ignore[no-untyped-call]
        keys = mx.ones((1, 2, POSITIONS, 64))
        layer.update_and_fetch(keys, keys)  # type: ignore[no-untyped-call]
        store.insert_cache("m", [first + 1] * POSITIONS, [layer])
    return store


def leftovers(directory: Path) -> list[str]:
    """Return the partial files a save left (their names start with a dot)."""
    return sorted(p.name for p in directory.rglob(".*")) if directory.is_dir() else []


def test_a_save_stops_at_the_floor_newest_first(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """With room for some entries above the floor, the newest are saved and the rest skipped, counted and logged."""
    with tmpfs(tmp_path, "16m") as disk:
        directory = disk / "prompt-cache" / "identity"
        fill_to(disk, 8 * MIB + 2 * MIB)  # 2 MiB above the 8 MiB floor: room for two or three entries
        store = store_of(6)
        with caplog.at_level(logging.WARNING):
            result = keep_entries(store, "m", directory, 4 * 10**9)
        space = disk_space(directory)
        assert space is not None and space.free_bytes >= space.floor_bytes
        assert result.saved >= 1 and result.skipped >= 1 and result.saved + result.skipped == 6
        assert (result.failed, result.stopped, leftovers(directory)) == (0, None, [])
        names = {p.name for p in directory.glob("*.safetensors")}
        newest = store.held_keys("m")[-result.saved :]
        assert names == {entry_name(tokens) for tokens, _ in newest}
        assert f"{result.skipped} prompt cache entries not saved" in caplog.text
        report = (directory / PROMPT_CACHE_REPORT).read_text()
        assert f'"skipped": {result.skipped}' in report and f'"skipped_total": {result.skipped}' in report


def test_a_disk_that_fills_during_a_save_leaves_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A write that meets a full disk removes its partial file and ends the save with one line, no traceback.

    The disk is filled by this test before the save and the floor check is told there is room (the one stub:
    a disk filled by another program between the check and the write cannot be timed otherwise).
    """
    with tmpfs(tmp_path, "12m") as disk:
        directory = disk / "prompt-cache" / "identity"
        directory.mkdir(parents=True, mode=0o700)
        os.chmod(directory.parent, 0o700)
        fill_to(disk, 300 * 1024)  # less than one entry
        real = disk_space
        calls: list[int] = []

        def roomy(path: Path | str) -> DiskSpace | None:
            calls.append(1)
            space = real(path)
            assert space is not None
            return space if len(calls) > 1 else DiskSpace(space.path, 10**12, 10**13, space.device)

        monkeypatch.setattr(prompt_cache, "disk_space", roomy)
        store = store_of(3)
        with caplog.at_level(logging.WARNING):
            result = save_entries(store, "m", store.held_keys("m"), directory, "identity")
        assert (result.saved, result.failed) == (0, 1)
        assert result.stopped is not None and "the disk is full" in result.stopped
        assert leftovers(directory) == [] and list(directory.glob("*.safetensors")) == []
        assert "Traceback" not in caplog.text and "no partial file is left" in caplog.text


def test_the_limit_at_start_shrinks_with_the_disk(tmp_path: Path) -> None:
    """Entries saved while the disk had room are cut to half the usable space once it fills up."""
    with tmpfs(tmp_path, "24m") as disk:
        root = disk / "prompt-cache"
        store = store_of(4)
        assert save_entries(store, "m", store.held_keys("m"), root / "identity", "identity").saved == 4
        kept = prompt_cache.kept_bytes(root)
        fill_to(disk, 0)
        space = disk_space(root)
        assert space is not None
        limit, left = fit_to_disk(root, 4 * 10**9)
        assert limit == (space.free_bytes + kept) // 2 and left <= limit < kept
