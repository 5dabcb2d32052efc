"""A census of the house's shape: gateway/'s top level, import circles, back-up arrows, the largest modules.

    .venv/bin/python scripts/house_census.py [--json]

Read from the sources with ``ast`` (lazy and type-only imports count: they tie modules as hard for a reader):

* the top-level modules of gateway/ (its flat files; subpackages are listed apart);
* the circles: every strongly connected set of two or more modules of the package, with the room it lies in;
* the back-up arrows inside gateway/ and runtime/: the imports that close a circle (a depth-first walk from each
  module in name order meets a module still on its path), so cutting them all would leave no circle;
* the ten largest modules by lines, and the counts of ``dict[str, Any]`` and ``type: ignore`` in mlx_agent/.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mlx_agent"
ROOMS = ("gateway", "runtime")
LARGEST = 10


def name_of(path: Path) -> str:
    """Return the dotted name of a source file of the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(dotted: str) -> bool:
    """Say whether a dotted name is a module or package of the source tree."""
    where = ROOT / dotted.replace(".", "/")
    return where.is_dir() or where.with_suffix(".py").is_file()


def imports(path: Path) -> set[str]:
    """Return the package modules a source imports, at any place in it."""
    name = name_of(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            found |= {f"{base}.{a.name}" if is_module(f"{base}.{a.name}") else base for a in node.names}
    return {t for t in found if t.startswith("mlx_agent.") and t != name}


def sources() -> list[Path]:
    """Return every source file of the package."""
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def graph() -> dict[str, set[str]]:
    """Return each module's imports of package modules (a package's ``__init__`` stands for the package)."""
    edges = {name_of(p): imports(p) for p in sources()}
    return {name: {t for t in targets if t in edges} for name, targets in edges.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Return the strongly connected sets of two or more modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    members.append(top)
                    if top == node:
                        break
                if len(members) > 1:
                    found.append(sorted(members))
    return sorted(found, key=lambda c: (-len(c), c))


def back_arrows(edges: dict[str, set[str]], room: str) -> list[tuple[str, str]]:
    """Return the imports inside ``room`` that close a circle: a depth-first walk meets a module on its path."""
    prefix = f"mlx_agent.{room}"
    inside = {n: {t for t in ts if t.startswith(prefix)} for n, ts in edges.items() if n.startswith(prefix)}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    arrows: list[tuple[str, str]] = []
    for root in sorted(inside):
        if root in state:
            continue
        work = [(root, iter(sorted(inside[root])))]
        state[root] = 1
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                work.pop()
            elif state.get(child) == 1:
                arrows.append((node, child))
            elif child not in state:
                state[child] = 1
                work.append((child, iter(sorted(inside[child]))))
    return sorted(arrows)


@dataclass(frozen=True)
class Census:
    """What the census counts."""

    gateway_top_modules: list[str]
    gateway_subpackages: list[str]
    circles: list[list[str]]
    back_arrows: dict[str, list[str]]
    largest: list[tuple[str, int]]
    dict_str_any: int
    type_ignore: int


def census() -> Census:
    """Return the census of the sources as they are now."""
    edges = graph()
    gateway = PACKAGE / "gateway"
    texts = {p: p.read_text(encoding="utf-8") for p in sources()}
    largest = sorted(texts, key=lambda p: -texts[p].count("\n"))[:LARGEST]
    return Census(
        gateway_top_modules=sorted(p.name for p in gateway.glob("*.py")),
        gateway_subpackages=sorted(p.name for p in gateway.iterdir() if (p / "__init__.py").is_file()),
        circles=circles(edges),
        back_arrows={room: [f"{a} -> {b}" for a, b in back_arrows(edges, room)] for room in ROOMS},
        largest=[(p.relative_to(ROOT).as_posix(), texts[p].count("\n")) for p in largest],
        dict_str_any=sum(t.count("dict[str, Any]") for t in texts.values()),
        type_ignore=sum(t.count("type: ignore") for t in texts.values()),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the census as one JSON document")
    found = census()
    if parser.parse_args().json:
        print(json.dumps(asdict(found), indent=2))
        return 0
    top = found.gateway_top_modules
    print(f"gateway/ top-level modules: {len(top)} ({', '.join(top)})")
    print(f"gateway/ subpackages: {', '.join(found.gateway_subpackages)}")
    print(f"circles: {len(found.circles)}")
    for circle in found.circles:
        print(f"  {circle[0].split('.')[1]} ({len(circle)}): {', '.join(circle)}")
    for room, listed in found.back_arrows.items():
        print(f"back-up arrows inside {room}/: {len(listed)}")
        for arrow in listed:
            print(f"  {arrow}")
    print("largest modules:")
    for path, lines in found.largest:
        print(f"  {lines:5d} {path}")
    print(f"dict[str, Any]: {found.dict_str_any}   type: ignore: {found.type_ignore}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
