"""Imports run only downward through the layers of DESIGN.md, read from the sources with ``ast``."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlx_agent.plan.front import FRONT_MODULES
from mlx_agent.plan.runtime import WORKER_MODULES, entry_sources
from mlx_agent.resources import PACKAGE_DIR

pytestmark = pytest.mark.fast

# The package's top-level modules are the bottom (records, errors, files, wire, identity, canonical...). plan/ is
# pure and above it; supervise/ does the effects of plans; cli/ renders both. runtime/ (inside the worker) and
# gateway/ (the front) are processes of their own: each sees the bottom only.
ALLOWED = {
    "bottom": {"bottom"},
    "plan": {"bottom", "plan"},
    "runtime": {"bottom", "runtime"},
    "gateway": {"bottom", "gateway"},
    "supervise": {"bottom", "plan", "supervise"},
    "cli": {"bottom", "plan", "supervise", "cli"},
    "entry": {"cli"},  # python -m mlx_agent
}
BOTTOM_PACKAGES = {"records", "errors"}  # folders of the bottom floor: the documents, one module each; the errors
# Shared by every process, importable by anything.
STDLIB_ONLY = {"mlx_agent.wire", "mlx_agent.tool_formats", "mlx_agent.worker_routes"}


def module_name(path: Path) -> str:
    """Return the dotted name of a source file of the package."""
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(name: str) -> str:
    """Return the layer a module of the package belongs to."""
    parts = name.split(".")
    if name == "mlx_agent.__main__":
        return "entry"
    if len(parts) == 1 or (len(parts) == 2 and (PACKAGE_DIR / f"{parts[1]}.py").is_file()):
        return "bottom"
    if parts[1] in BOTTOM_PACKAGES:
        return "bottom"
    return parts[1]


def is_module(dotted: str) -> bool:
    """Say whether a dotted name is a module or package of the source tree."""
    where = PACKAGE_DIR.parent / dotted.replace(".", "/")
    return where.is_dir() or where.with_suffix(".py").is_file()


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """Yield each package module a source imports (lazy and type-only imports included), with its line."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            # ``from mlx_agent.plan import recipes`` imports a module; ``from mlx_agent.files import x`` a name.
            targets = [f"{base}.{a.name}" if is_module(f"{base}.{a.name}") else base for a in node.names]
        else:
            continue
        for target in targets:
            if target == "mlx_agent" or target.startswith("mlx_agent."):
                yield node.lineno, target


SOURCES = sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache
def imports_of(path: Path) -> tuple[tuple[int, str], ...]:
    """Return ``imported(path)`` once per run: several tests read every module's imports."""
    return tuple(imported(path))


def graph() -> dict[str, set[str]]:
    """Return every package module's imports of package modules."""
    return {module_name(p): {target for _, target in imports_of(p)} for p in SOURCES}


def test_the_layers_cover_the_package() -> None:
    """Every module of the package falls in a layer the table names, so a new folder must be placed."""
    unplaced = sorted({layer(module_name(p)) for p in SOURCES} - ALLOWED.keys())
    assert unplaced == []


def test_no_module_imports_a_layer_above_or_beside_its_own() -> None:
    """No module imports from a layer its own may not see (plan never imports supervise, runtime never plan...)."""
    upward = [
        f"{path.relative_to(PACKAGE_DIR.parent)}:{line} imports {target}"
        for path in SOURCES
        for line, target in imports_of(path)
        if layer(target) not in ALLOWED[layer(module_name(path))]
    ]
    assert upward == []


@pytest.mark.parametrize("name", sorted(STDLIB_ONLY))
def test_the_wire_module_imports_nothing_of_the_package(name: str) -> None:
    """The module every process shares imports the standard library only."""
    assert graph()[name] == set()


def source_name(name: str) -> str:
    """Return a module's file, relative to the package (a package's is its ``__init__.py``)."""
    path = name.removeprefix("mlx_agent.").replace(".", "/")
    return f"{path}/__init__.py" if (PACKAGE_DIR / path).is_dir() else f"{path}.py"


def bottom_modules_run_by(process: str) -> set[str]:
    """Return the bottom modules (as file names) that a layer's modules import, at any depth."""
    edges = graph()
    seen: set[str] = set()
    todo = [name for name in edges if layer(name) == process]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(target for target in edges.get(name, ()) if target in edges)
    return {source_name(name) for name in seen if layer(name) == "bottom" and name != "mlx_agent"}


def test_the_front_binds_every_module_it_runs_and_no_other() -> None:
    """The bottom modules the front imports (at any depth) are exactly those its plan binds by content."""
    assert sorted(FRONT_MODULES) == sorted(bottom_modules_run_by("gateway"))


def test_the_worker_binds_every_module_it_runs_and_no_other() -> None:
    """The bottom modules the worker imports are exactly its entry's bound ones, so no front-only edit stales it."""
    assert sorted(WORKER_MODULES) == sorted(bottom_modules_run_by("runtime"))
    assert set(WORKER_MODULES) <= set(entry_sources())


def test_the_native_entry_spells_the_wire_names_it_cannot_import() -> None:
    """The native entry runs without this package, so its copies of the worker's variables must equal wire's."""
    from mlx_agent import wire
    from mlx_agent.runtime.entries import native_entry

    assert (native_entry.PORT_ENV, native_entry.KEY_ENV) == (wire.PORT_ENV, wire.KEY_ENV)
    assert native_entry.PREAUTH_TIMEOUT_S == wire.HEADER_TIMEOUT_S  # the front's own header deadline
    assert graph()["mlx_agent.runtime.entries.native_entry"] == set()
