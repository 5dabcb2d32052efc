"""The group launcher's seams into mlx.launch, and the files it writes for a local rank in mlx.launch's place."""

from __future__ import annotations

import importlib
import os
import stat
import types
from pathlib import Path

import pytest

from mlx_agent.runtime.distributed.launch_files import remove_launch_files, write_launch_files
from mlx_agent.runtime.distributed.launcher import SEAMS, seams_changed


def test_the_installed_mlx_launch_has_every_seam() -> None:
    """The pinned mlx's launch module has the names this launcher patches, and makes ranks as it expects."""
    assert seams_changed(importlib.import_module("mlx._distributed_utils.launch")) is None


def test_a_changed_rank_process_is_named() -> None:
    """A RemoteProcess taking other arguments is refused by name, as a missing seam is."""

    class RemoteProcess:
        def __init__(self, rank: int, host: str, files: dict[str, str]) -> None: ...

    upstream = types.SimpleNamespace(**{**{name: object() for name in SEAMS}, "RemoteProcess": RemoteProcess})
    assert seams_changed(upstream) == (
        "makes a rank's process from rank, host, files, not rank, host, python, cwd, files, env, command"
    )
    del upstream.select
    assert seams_changed(upstream) == "has no select"


def test_launch_files_are_written_as_mktemp_and_echo_would_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each file is this user's alone, named tmp.* in the temp folder, holding the content and a newline."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    written = write_launch_files({"MLX_HOSTFILE": '[["127.0.0.1:5000"], ["127.0.0.1:5001"]]', "EMPTY": ""})
    assert set(written) == {"MLX_HOSTFILE", "EMPTY"}
    for path in written.values():
        file = Path(path)
        assert file.parent == tmp_path and file.name.startswith("tmp.")
        assert stat.S_IMODE(file.stat().st_mode) == 0o600 and file.stat().st_uid == os.getuid()
    assert Path(written["MLX_HOSTFILE"]).read_text() == '[["127.0.0.1:5000"], ["127.0.0.1:5001"]]\n'
    assert Path(written["EMPTY"]).read_text() == "\n"
    os.unlink(written["EMPTY"])  # a rank removes its hosts file itself once the ring has formed
    remove_launch_files(written.values())
    assert list(tmp_path.iterdir()) == []
