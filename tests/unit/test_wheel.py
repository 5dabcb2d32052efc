"""The wheel carries recipes/ and schemas/ inside the package, where the one resolver finds them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from mlx_agent.resources import data_dir, recipes_dir, schemas_dir
from tests.conftest import REPO_ROOT


def test_the_wheel_ships_recipes_schemas_and_kernels(tmp_path: Path) -> None:
    """A wheel built from the checkout lists every recipe, schema and kernel file inside mlx_agent/."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("mlx_agent-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("recipes", "schemas"):
        for path in (REPO_ROOT / folder).glob("*.json"):
            assert f"mlx_agent/{folder}/{path.name}" in names
    assert {
        "mlx_agent/runtime/accel/kernels/support.json",
        "mlx_agent/runtime/accel/kernels/m5_q4_prefill.metal",
    } <= names


def test_the_resolver_reads_the_checkout_or_the_installed_package(tmp_path: Path) -> None:
    """From a checkout the folders beside the package are used; installed, the ones inside it."""
    assert recipes_dir() == REPO_ROOT / "recipes" and schemas_dir() == REPO_ROOT / "schemas"
    assert data_dir("recipes").joinpath("mlx_lm.json").is_file()
