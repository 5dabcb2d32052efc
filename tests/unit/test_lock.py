"""uv.lock is the tested set: it matches pyproject.toml, and scripts/install bootstraps the uv it pins."""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.install_support import PYPROJECT, uv

LOCK = tomllib.loads((REPO_ROOT / "uv.lock").read_text())


def locked(name: str) -> str:
    """Return the one locked version of a package."""
    [version] = {p["version"] for p in LOCK["package"] if p["name"] == name}
    return str(version)


def copy_project(dest: Path) -> Path:
    """Copy what uv reads to lock the project (pyproject.toml, uv.lock, README.md, the version file) to ``dest``."""
    for name in ("pyproject.toml", "uv.lock", "README.md", "mlx_agent/__init__.py"):
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, dest / name)
    return dest


def test_the_lock_matches_pyproject() -> None:
    """The lock check (uv lock --check, offline) finds uv.lock up to date with pyproject.toml."""
    proc = uv("lock", "--check", "--offline", cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr


def test_the_check_fails_when_pyproject_changes(tmp_path: Path) -> None:
    """The same check refuses a copy whose pyproject.toml gained a requirement the lock does not hold."""
    project = copy_project(tmp_path)
    text = (project / "pyproject.toml").read_text()
    (project / "pyproject.toml").write_text(text.replace('    "pytest>=8",\n', '    "pytest>=8",\n    "packaging",\n'))
    proc = uv("lock", "--check", "--offline", cwd=project)
    if "network was disabled" in proc.stderr:  # re-resolving needs index pages uv's cache lacks: fetch them
        proc = uv("lock", "--check", cwd=project)
    assert proc.returncode != 0 and "needs to be updated" in proc.stderr, proc.stderr


@pytest.mark.fast
def test_install_bootstraps_the_locked_uv() -> None:
    """scripts/install's UV_VERSION is the uv the lock pins (so the sync keeps the uv that made it)."""
    match = re.search(r'^UV_VERSION="([^"]+)"', (REPO_ROOT / "scripts" / "install").read_text(), re.MULTILINE)
    assert match is not None and locked("uv") == match.group(1)


@pytest.mark.fast
def test_the_lock_holds_both_systems_and_every_extra() -> None:
    """The lock is for Linux and macOS and holds each system's MLX backend, mlx-vlm and the test tools."""
    assert set(PYPROJECT["tool"]["uv"]["environments"]) == {"sys_platform == 'linux'", "sys_platform == 'darwin'"}
    names = {p["name"] for p in LOCK["package"]}
    assert {"mlx", "mlx-cpu", "mlx-metal", "mlx-lm", "mlx-vlm", "pytest-xdist", "jsonschema", "uv"} <= names
