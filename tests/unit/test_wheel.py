"""The wheel carries recipes/ and schemas/ inside the package, where the one resolver finds them."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from mlx_agent.resources import PACKAGE_DIR, data_dir, recipes_dir, schemas_dir
from tests.conftest import REPO_ROOT
from tests.install_support import uv


def test_the_wheel_ships_recipes_schemas_and_kernels(tmp_path: Path) -> None:
    """A wheel built from the checkout lists every recipe, schema and kernel file inside mlx_agent/."""
    build = ["build", "--wheel", "--no-build-isolation", "--python", sys.executable, "--offline", "--quiet"]
    proc = uv(*build, "--out-dir", str(tmp_path), str(REPO_ROOT), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    [wheel] = tmp_path.glob("mlx_agent-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("recipes", "schemas"):
        for path in (REPO_ROOT / folder).glob("*.json"):
            assert f"mlx_agent/{folder}/{path.name}" in names
    # Package data wherever it lives in the package (the runtime's kernels): every file that is not Python.
    data = {p for p in PACKAGE_DIR.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")}
    assert any(p.suffix == ".metal" for p in data)
    assert {f"mlx_agent/{p.relative_to(PACKAGE_DIR).as_posix()}" for p in data} <= names


@pytest.mark.fast
def test_the_resolver_reads_the_checkout_or_the_installed_package(tmp_path: Path) -> None:
    """From a checkout the folders beside the package are used; installed, the ones inside it."""
    assert recipes_dir() == REPO_ROOT / "recipes" and schemas_dir() == REPO_ROOT / "schemas"
    assert data_dir("recipes").joinpath("mlx_lm.json").is_file()
