"""What the install tests share: the venv's uv, pyproject's declared ranges, and fresh environments made with uv."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO_ROOT

UV = Path(sys.executable).with_name("uv")  # the test extra's uv, the one scripts/install syncs uv.lock with
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def declared(extra: str | None, name: str) -> tuple[str, set[str]]:
    """Return a requirement of pyproject.toml (``extra`` None: the dependencies) as its name and specifier set."""
    project = PYPROJECT["project"]
    requirements = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9._-]+)(\[[^]]*\])?\s*(.*)", requirement)
        if match and match.group(1) == name:
            return name, {s.strip() for s in match.group(3).split(",") if s.strip()}
    raise AssertionError(f"{name} is not declared in {extra or 'dependencies'}")


def parsed(requirement: str) -> tuple[str, set[str]]:
    """Return a requirement string's name and specifier set, whatever order its specifiers come in."""
    match = re.fullmatch(r"([A-Za-z0-9._-]+)\s*(.*)", requirement)
    assert match is not None, requirement
    return match.group(1), {s.strip() for s in match.group(2).split(",") if s.strip()}


def uv_env(**extra: str) -> dict[str, str]:
    """Return an environment for uv with nothing that would point it at another project or environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_PROJECT", "VIRTUAL_ENV", "PYTHON"))}
    return {**env, **extra}


def uv(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run the venv's uv (with ``env`` added to a clean environment) and return the finished process, unchecked."""
    return subprocess.run(
        [str(UV), *args], capture_output=True, text=True, cwd=cwd, env=uv_env(**(env or {})), timeout=timeout
    )


def make_venv(path: Path) -> Path:
    """Create an empty venv with uv from this interpreter's base Python and return its interpreter."""
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = uv("venv", "--quiet", "--python", sys.executable, str(path), cwd=path.parent)
    assert proc.returncode == 0, proc.stderr
    return path / "bin" / "python"
