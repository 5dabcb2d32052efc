"""Small private disks for the tests of what a full disk does (root only; the test is skipped otherwise)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(tmp_path: Path, size: str, name: str = "disk") -> Iterator[Path]:
    """Mount a private tmpfs of ``size`` at ``tmp_path / name``, yield it, and unmount it."""
    mount = tmp_path / name
    mount.mkdir(mode=0o700)
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)]).returncode
    ):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@contextlib.contextmanager
def small_disk(tmp_path: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` and yield its private receipts directory (root only; skipped otherwise)."""
    with tmpfs(tmp_path, size, "small") as mount:
        (mount / "receipts" / "serve").mkdir(parents=True, mode=0o700)
        os.chmod(mount / "receipts", 0o700)
        yield mount / "receipts"
