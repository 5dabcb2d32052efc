"""The group launcher's seams into mlx.launch, and what its ranks write, remove and stop in mlx.launch's place."""

from __future__ import annotations

import errno
import importlib
import os
import stat
import subprocess
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.runtime.distributed import launcher
from mlx_agent.runtime.distributed.launch_files import remove_launch_files, write_launch_files
from mlx_agent.runtime.distributed.launcher import LOCAL_HOST, SEAMS, Ranks, rank_process_class, seams_changed

UPSTREAM: Any = importlib.import_module("mlx._distributed_utils.launch")
HOSTS = '[["127.0.0.1:5000"], ["127.0.0.1:5001"]]'


class FakeRemoteProcess:
    """mlx.launch's RemoteProcess as RankProcess uses it, over a real child process that sleeps."""

    def __init__(
        self, rank: int, host: str, python: Any, cwd: Any, files: dict[str, str], env: list[str], command: Any
    ) -> None:
        self.given = (files, env)
        self._is_local = host == LOCAL_HOST
        self._pidfile: str | None = None
        self._process = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE)
        self._killed = False
        self.kill_script_ran = False

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The rank's process."""
        return self._process

    @property
    def exit_status(self) -> tuple[int | None, bool]:
        """The process's status, if it exited, and whether a kill script stopped it."""
        return self._process.poll(), self._killed

    def preprocess_output(self, data: str, is_stdout: bool = False) -> str:
        """Pass the output on."""
        return data

    def terminate(self) -> None:
        """Stand for the kill script: stop the process and say so."""
        self.kill_script_ran = True
        self._process.terminate()
        self._process.wait()


@pytest.fixture
def ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ranks:
    """Give the launcher a fresh set of ranks, and the temp folder at ``tmp_path``."""
    fresh = Ranks()
    monkeypatch.setattr(launcher, "RANKS", fresh)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return fresh


def test_the_installed_mlx_launch_has_every_seam() -> None:
    """The pinned mlx's launch module has the names this launcher patches, and makes ranks as it expects."""
    assert seams_changed(UPSTREAM) is None


def test_a_changed_rank_process_is_named() -> None:
    """A RemoteProcess with other arguments, attributes or local host, or a missing name, is refused by name."""

    def upstream_with(process: type) -> types.SimpleNamespace:
        return types.SimpleNamespace(**{**{name: object() for name in SEAMS}, "RemoteProcess": process})

    class Renamed(UPSTREAM.RemoteProcess):  # type: ignore[misc]
        def __init__(self, rank: int, host: str, files: dict[str, str]) -> None: ...

    assert seams_changed(upstream_with(Renamed)) == (
        "takes RemoteProcess.__init__(self, rank, host, files), "
        "not (self, rank, host, python, cwd, files, env, command)"
    )

    class Unset(UPSTREAM.RemoteProcess):  # type: ignore[misc]
        def __init__(
            self, rank: int, host: str, python: Any, cwd: Any, files: dict[str, str], env: list[str], command: Any
        ) -> None:
            self._is_local, self._process = host == "127.0.0.1", None

    assert seams_changed(upstream_with(Unset)) == "no longer sets RemoteProcess's _pidfile"

    class OtherHost(UPSTREAM.RemoteProcess):  # type: ignore[misc]
        def __init__(
            self, rank: int, host: str, python: Any, cwd: Any, files: dict[str, str], env: list[str], command: Any
        ) -> None:
            self._is_local, self._pidfile, self._process = host == "localhost", None, None

    assert seams_changed(upstream_with(OtherHost)) == "no longer runs a rank on 127.0.0.1 without ssh"
    without_terminate = {name: value for name, value in vars(FakeRemoteProcess).items() if name != "terminate"}
    assert seams_changed(upstream_with(type("Process", (), without_terminate))) == (
        "has no RemoteProcess.make_launch_script, RemoteProcess.terminate"
    )
    upstream = upstream_with(UPSTREAM.RemoteProcess)
    del upstream.select
    assert seams_changed(upstream) == "has no select"


def test_launch_files_are_written_as_mktemp_and_echo_would_and_removed(ranks: Ranks, tmp_path: Path) -> None:
    """Each file is this user's alone, named tmp.* in the temp folder, holding the content and a newline."""
    written = write_launch_files({"MLX_HOSTFILE": HOSTS, "EMPTY": ""})
    assert set(written) == {"MLX_HOSTFILE", "EMPTY"}
    for path in written.values():
        file = Path(path)
        assert file.parent == tmp_path and file.name.startswith("tmp.")
        assert stat.S_IMODE(file.stat().st_mode) == 0o600 and file.stat().st_uid == os.getuid()
    assert Path(written["MLX_HOSTFILE"]).read_text() == HOSTS + "\n"
    assert Path(written["EMPTY"]).read_text() == "\n"
    os.unlink(written["MLX_HOSTFILE"])  # a rank removes its hosts file itself once the ring has formed
    remove_launch_files(written.values())
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_no_file(ranks: Ranks, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails part way (a full disk) removes the files already written and raises."""
    made = tempfile.mkstemp

    def second_fails(prefix: str) -> tuple[int, str]:
        if list(tmp_path.iterdir()):
            raise OSError(errno.ENOSPC, "No space left on device")
        return made(prefix=prefix)

    monkeypatch.setattr(tempfile, "mkstemp", second_fails)
    with pytest.raises(OSError, match="No space"):
        write_launch_files({"MLX_HOSTFILE": HOSTS, "MLX_IBV_DEVICES": "[]"})
    assert list(tmp_path.iterdir()) == []


def test_a_local_rank_gets_its_files_by_environment_and_is_stopped_without_a_kill_script(
    ranks: Ranks, tmp_path: Path
) -> None:
    """Its files are written here and named in its environment; a stop reaps it and removes them and its pid file."""
    rank = rank_process_class(FakeRemoteProcess)(1, LOCAL_HOST, None, None, {"MLX_HOSTFILE": HOSTS}, ["A=1"], ["x"])
    files, env = rank.given
    assert files == {} and env[0] == "A=1" and env[1].startswith("MLX_HOSTFILE=")
    hosts = Path(env[1].split("=", 1)[1])
    assert hosts.read_text() == HOSTS + "\n"
    pidfile = tmp_path / "tmp.pidfile0"
    pidfile.write_text(f"{rank.process.pid}\n")
    rank._pidfile = str(pidfile)
    rank.terminate()
    assert not rank.kill_script_ran and rank.process.returncode is not None
    assert list(tmp_path.iterdir()) == []
    assert rank.exit_status[0] is not None and ranks.statuses == [(1, 128 + 15, True)]
    assert ranks.exit_status() == 143


def test_a_remote_rank_keeps_mlx_launch_files_and_kill_script(ranks: Ranks, tmp_path: Path) -> None:
    """A rank on another host gets its files through mlx.launch's script and is stopped through its kill script."""
    rank = rank_process_class(FakeRemoteProcess)(0, "10.0.0.2", None, None, {"MLX_HOSTFILE": HOSTS}, [], ["x"])
    assert rank.given == ({"MLX_HOSTFILE": HOSTS}, [])
    rank.terminate()
    assert rank.kill_script_ran and list(tmp_path.iterdir()) == []


def test_files_that_cannot_be_written_are_left_to_the_rank_script(
    ranks: Ranks, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A temp folder that refuses the files hands them to mlx.launch's script, which fails the rank as it can."""

    def full(prefix: str) -> tuple[int, str]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full)
    rank = rank_process_class(FakeRemoteProcess)(0, LOCAL_HOST, None, None, {"MLX_HOSTFILE": HOSTS}, [], ["x"])
    assert rank.given == ({"MLX_HOSTFILE": HOSTS}, [])
    assert "rank 0: cannot write its launch files: [Errno 28] No space left on device" in capsys.readouterr().err
    rank.terminate()


def test_a_rank_that_cannot_start_fails_the_group(
    ranks: Ranks, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rank whose process cannot be made leaves no file, and the group's status says it failed."""

    class NoProcess(FakeRemoteProcess):
        def __init__(self, *args: Any) -> None:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    with pytest.raises(OSError):
        rank_process_class(NoProcess)(1, LOCAL_HOST, None, None, {"MLX_HOSTFILE": HOSTS}, [], ["x"])
    assert list(tmp_path.iterdir()) == []
    assert ranks.statuses == [(1, 1, False)] and ranks.exit_status() == 1
    assert "rank 1 could not start: [Errno 11] Resource temporarily unavailable" in capsys.readouterr().err
