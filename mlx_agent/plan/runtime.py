"""Resolve a runtime name to its recipe, the program that will run, and the versions it brings.

Installed-ness and versions are read from ``*.dist-info`` directory names rather than through
``importlib.metadata``, which costs tens of milliseconds to import on every preview.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import mlx_agent
from mlx_agent.errors import RuntimeNotInstalled, UnsupportedRuntime
from mlx_agent.plan.identity import sha256_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PACKAGE_DIR = Path(mlx_agent.__file__).resolve().parent
RECIPES_DIR = PACKAGE_DIR / "recipes"
ENTRY_DIR = PACKAGE_DIR / "runtime"
ENTRY_MODULE = "mlx_agent.runtime"


def recipe_names() -> list[str]:
    """Return the names of the runtimes mlx-agent has recipes for."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.json"))


def load_recipe(name: str) -> tuple[dict[str, Any], str]:
    """Return a runtime's recipe and the sha256 of its file."""
    path = RECIPES_DIR / f"{name}.json"
    if name not in recipe_names():
        raise UnsupportedRuntime(f"no recipe for runtime {name!r}",
                                 details={"runtime": name, "known": recipe_names()})
    raw = path.read_bytes()
    return json.loads(raw), hashlib.sha256(raw).hexdigest()


def _normalise(dist: str) -> str:
    return re.sub(r"[-_.]+", "_", dist).lower()


def dist_version(dist: str, paths: list[str]) -> str | None:
    """Return the installed version of a distribution found in ``paths``, or None."""
    wanted = _normalise(dist)
    for entry in paths:
        for info in glob.glob(os.path.join(glob.escape(entry), "*.dist-info")):
            name, _, version = os.path.basename(info)[: -len(".dist-info")].partition("-")
            if _normalise(name) == wanted:
                return version
    return None


def own_site_paths() -> list[str]:
    """Return this interpreter's package directories, in import order."""
    return [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and os.path.isdir(p)]


def entry_sources() -> dict[str, str]:
    """Return the sha256 of each source file of the wrapped entry, keyed by its package-relative name."""
    return {f"runtime/{p.name}": sha256_file(p) for p in sorted(ENTRY_DIR.glob("*.py"))}


def _versions(recipe: dict[str, Any], paths: list[str]) -> dict[str, str | None]:
    return {dep: dist_version(dep, paths) for dep in recipe["dependencies"]}


def _shebang_interpreter(exe: Path) -> Path | None:
    with open(exe, "rb") as fh:
        first = fh.readline(4096)
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    return Path(words[0]) if words else None


def _resolve_executable(raw: str, recipe: dict[str, Any]) -> dict[str, Any]:
    given = Path(raw)
    if not given.is_absolute():
        raise RuntimeNotInstalled(f"--runtime-executable {raw} is not an absolute path",
                                  details={"executable": raw})
    try:
        exe = given.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise RuntimeNotInstalled(f"runtime executable {raw} cannot be resolved: {exc}",
                                  details={"executable": raw}) from exc
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise RuntimeNotInstalled(f"runtime executable {exe} is not an executable file",
                                  details={"executable": str(exe)})
    interpreter = _shebang_interpreter(exe)
    paths: list[str] = []
    if interpreter is not None:
        paths = sorted(glob.glob(str(interpreter.parent.parent / "lib" / "python3*" / "site-packages")))
    versions = _versions(recipe, paths)
    if versions.get(recipe["distribution"]) is None:
        raise RuntimeNotInstalled(
            f"{exe} does not come with {recipe['distribution']} installed beside its interpreter",
            details={"executable": str(exe), "interpreter": str(interpreter) if interpreter else None})
    return {
        "launcher": "native",
        "executable": str(exe),
        "executable_sha256": sha256_file(exe),
        "interpreter": str(interpreter) if interpreter else None,
        "versions": versions,
        "adapter_enabled": False,
    }


def resolve_runtime(name: str, executable: str | None = None) -> dict[str, Any]:
    """Return the plan's runtime record: recipe, launcher, interpreter and versions."""
    recipe, recipe_sha = load_recipe(name)
    base = {"name": name, "recipe_sha256": recipe_sha}
    if executable is not None:
        return {**base, **_resolve_executable(executable, recipe)}
    paths = own_site_paths()
    versions = _versions(recipe, paths)
    if versions.get(recipe["distribution"]) is None or importlib.util.find_spec(recipe["package"]) is None:
        raise RuntimeNotInstalled(
            f"runtime {name} ({recipe['distribution']}) is not installed for {sys.executable}",
            details={"runtime": name, "interpreter": sys.executable})
    return {
        **base,
        "launcher": "wrapped",
        "interpreter": str(Path(sys.executable).absolute()),
        "module": ENTRY_MODULE,
        "entry_sources": entry_sources(),
        "versions": {**versions, "mlx-agent": mlx_agent.__version__},
        "adapter_enabled": True,
    }
