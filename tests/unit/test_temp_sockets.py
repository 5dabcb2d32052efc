"""A front's temp socket directory: private, locked while its front lives, swept once its front is gone."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlx_agent.gateway.models.temp_sockets import LOCK, TempSocketDir

HOLD = """
import sys, time
from mlx_agent.gateway.models.temp_sockets import TempSocketDir
d = TempSocketDir()
print(d.path, flush=True)
time.sleep(600)
"""


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point tempfile (here and in child processes) at a fresh directory; yield the per-user root there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    yield tmp_path / f"mlx-agent-{os.getuid()}"


def _held(path: Path) -> bool:
    fd = os.open(path / LOCK, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _front_in_child() -> tuple[subprocess.Popen[str], Path]:
    child = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, Path(child.stdout.readline().strip())


@pytest.mark.fast
def test_dir_is_private_locked_and_removed_on_close(tmp_root: Path) -> None:
    """The directory sits under the 0700 per-user root, is 0700, stays locked while open and goes on close."""
    sockets = TempSocketDir()
    assert sockets.path.parent == tmp_root
    assert sockets.path.name.startswith(f"{os.getpid()}-")
    assert tmp_root.stat().st_mode & 0o777 == 0o700
    assert sockets.path.stat().st_mode & 0o777 == 0o700
    assert _held(sockets.path)
    sockets.close()
    assert not sockets.path.exists()


def test_killed_front_dir_is_swept_live_one_kept(tmp_root: Path) -> None:
    """A SIGKILLed front's directory goes when the next front starts; a live front's and a staging one stay."""
    live, live_dir = _front_in_child()
    dead, dead_dir = _front_in_child()
    try:
        dead.send_signal(signal.SIGKILL)
        dead.wait(10)
        assert dead_dir.is_dir()  # nothing could remove it
        staging = tmp_root / ".new-abc"
        staging.mkdir()
        sockets = TempSocketDir()
        assert not dead_dir.exists()
        assert live_dir.is_dir() and _held(live_dir)
        assert staging.is_dir()
        sockets.close()
    finally:
        live.kill()
        live.wait(10)


@pytest.mark.fast
def test_unsafe_root_falls_back_to_a_lone_temp_dir(tmp_root: Path, tmp_path: Path) -> None:
    """A link planted where the per-user root goes is not followed: the front gets a plain mkdtemp dir."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tmp_root.symlink_to(elsewhere)
    sockets = TempSocketDir()
    assert sockets.path.parent == tmp_path and sockets.path.name.startswith("mlx-agent-")
    assert list(elsewhere.iterdir()) == []
    sockets.close()
    assert not sockets.path.exists()
