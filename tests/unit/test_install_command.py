"""runtime_not_installed names the command that installs the missing runtime where it would run, as that was made."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mlx_agent.errors.commands import RuntimeNotInstalled
from mlx_agent.installed import install_command, own_requirement, own_site_paths
from mlx_agent.plan.runtime_select import select_runtime
from tests.install_support import declared, make_venv, parsed

REQUIREMENT = "mlx-vlm<0.8,>=0.7"
VISION = {"model_type": "qwen2_vl", "vision_config": {"depth": 2}}


@pytest.mark.fast
def test_own_requirement_is_the_vlm_extra_declared_in_pyproject() -> None:
    """The installed metadata gives mlx-vlm's range as pyproject.toml's vlm extra declares it."""
    found = own_requirement("mlx-vlm", own_site_paths())
    assert found is not None and parsed(found) == declared("vlm", "mlx-vlm")
    found_lm = own_requirement("mlx_lm", own_site_paths())  # names are compared normalised
    assert found_lm is not None and parsed(found_lm) == declared(None, "mlx-lm")
    assert own_requirement("no-such-dist", own_site_paths()) is None


def test_a_venv_made_by_uv_gets_uv_pip_install_with_its_interpreter(tmp_path: Path) -> None:
    """A venv whose pyvenv.cfg says uv made it is told uv pip install --python with its own interpreter."""
    python = make_venv(tmp_path / "env")
    command = install_command(REQUIREMENT, tmp_path / "env", python)
    assert shlex.split(command) == ["uv", "pip", "install", "--python", str(python), REQUIREMENT]


def test_a_venv_made_by_python_gets_pip_through_its_interpreter(tmp_path: Path) -> None:
    """A venv made by python -m venv is told INTERPRETER -m pip install, with the requirement quoted for a shell."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True, timeout=120)
    python = tmp_path / "env" / "bin" / "python"
    command = install_command(REQUIREMENT, tmp_path / "env", python)
    assert command == f"{python} -m pip install '{REQUIREMENT}'"


@pytest.mark.fast
def test_a_pipx_venv_gets_pipx_inject(tmp_path: Path) -> None:
    """A pipx venv (pipx_metadata.json in it) is told pipx inject with the venv's name."""
    prefix = tmp_path / "venvs" / "mlx-agent"
    prefix.mkdir(parents=True)
    (prefix / "pipx_metadata.json").write_text("{}")
    assert install_command(REQUIREMENT, prefix, prefix / "bin" / "python") == f"pipx inject mlx-agent '{REQUIREMENT}'"


def test_a_uv_tool_is_reinstalled_with_its_receipts_requirements_and_the_runtime(tmp_path: Path) -> None:
    """A uv tool environment is told uv tool install with its source, every --with and its python kept."""
    prefix = tmp_path / "tools" / "mlx-agent"
    python = make_venv(prefix)
    (prefix / "uv-receipt.toml").write_text(
        "[tool]\nrequirements = [\n"
        '    { name = "mlx-agent", path = "/w/mlx_agent-0.2.0-py3-none-any.whl" },\n'
        '    { name = "mlx", extras = ["cpu"], specifier = ">=0.32" },\n'
        ']\npython = "/usr/bin/python3.11"\n'
    )
    assert shlex.split(install_command(REQUIREMENT, prefix, python)) == [
        *("uv", "tool", "install", "/w/mlx_agent-0.2.0-py3-none-any.whl", "--with", "mlx[cpu]>=0.32"),
        *("--python", "/usr/bin/python3.11", "--with", REQUIREMENT),
    ]
    (prefix / "uv-receipt.toml").write_text(
        '[tool]\nrequirements = [{ name = "mlx-agent", extras = ["cpu"], path = "/w/a.whl" }]\n'
    )
    assert shlex.split(install_command(REQUIREMENT, prefix, python))[3] == "mlx-agent[cpu] @ file:///w/a.whl"
    (prefix / "uv-receipt.toml").write_text(
        '[tool]\nrequirements = [{ name = "mlx-agent", git = "https://example.invalid/mlx-agent" }]\n'
    )
    # A source this does not spell falls back to the environment's own uv pip install.
    assert shlex.split(install_command(REQUIREMENT, prefix, python))[:3] == ["uv", "pip", "install"]


def test_an_executable_from_an_environment_without_the_runtime_is_refused_with_its_command(tmp_path: Path) -> None:
    """--runtime mlx-vlm with an executable whose environment lacks mlx_vlm names that environment's command."""
    python = make_venv(tmp_path / "env")
    exe = tmp_path / "env" / "bin" / "mlx_vlm.server"
    exe.write_text(f"#!{python}\n")
    exe.chmod(0o755)
    with pytest.raises(RuntimeNotInstalled) as caught:
        select_runtime("mlx-vlm", VISION, str(exe))
    command = caught.value.details["install_command"]
    words = shlex.split(command)
    assert words[:5] == ["uv", "pip", "install", "--python", str(python)]
    assert parsed(words[5]) == declared("vlm", "mlx-vlm")
    assert command in caught.value.remediation and str(python) in caught.value.message
