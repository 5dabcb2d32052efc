"""Keep transformers' index of its model files between worker starts, instead of rebuilding it in each one.

transformers 5 reads every one of its ~3,300 model source files when it is imported, to learn which names each
exports and which backends they need (``create_import_structure_from_path``, then ``define_import_structure``):
about half a second of each worker's start on these machines, and the same result every time for one installed
transformers. The first worker saves the index under the user's cache directory
(``$XDG_CACHE_HOME/mlx-agent``, ``~/Library/Caches/mlx-agent`` on macOS, else ``~/.cache/mlx-agent``), named
by the sha256 of transformers' installed ``RECORD`` (which lists every file with its hash) and the models
folder's modification time; later workers read it. Anything unexpected (no ``RECORD``, an editable install,
a renamed function in a newer transformers, an unreadable or unsafe cache) falls back to transformers' own
scan: the index only ever saves time.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

MODULE = "transformers.utils.import_utils"
FUNCTION = "create_import_structure_from_path"  # the seam: transformers' recursive scan of a folder
FORMAT = 1


def cache_root() -> Path:
    """Return the user's cache directory for mlx-agent (derived data any worker may rebuild)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "mlx-agent"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "mlx-agent"
    return Path.home() / ".cache" / "mlx-agent"


def index_path(root: Path) -> Path | None:
    """Return the index file for the installed transformers, or None when it has no ``RECORD`` to name it by."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    records = sorted(package.parent.glob("transformers-*.dist-info/RECORD"))
    if len(records) != 1:
        return None  # an editable or source checkout, or two installs in one folder: nothing names the files
    digest = hashlib.sha256(records[0].read_bytes())
    digest.update(f"{FORMAT}:{package}:{(package / 'models').stat().st_mtime_ns}".encode())
    return root / f"transformers-index-{digest.hexdigest()[:32]}.json"


def encode(value: Any) -> Any:
    """Write an import structure (dicts keyed by names or frozensets of backends, sets of names) as JSON."""
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, frozenset):
        return {"frozenset": sorted(value)}
    if isinstance(value, set):
        return {"set": sorted(value)}
    if isinstance(value, str):
        return value
    raise TypeError(f"an import structure holds no {type(value).__name__}")


def decode(value: Any) -> Any:
    """Read back what ``encode`` wrote."""
    if isinstance(value, str):
        return value
    if "dict" in value:
        return {decode(k): decode(v) for k, v in value["dict"]}
    if "frozenset" in value:
        return frozenset(value["frozenset"])
    return set(value["set"])


def _read(path: Path) -> dict[str, Any]:
    from mlx_agent.files import check_private_dir, open_private

    try:
        check_private_dir(path.parent)
        with os.fdopen(open_private(path, os.O_RDONLY), "rb") as fh:
            return {folder: decode(structure) for folder, structure in json.loads(fh.read()).items()}
    except Exception:  # absent, damaged or not ours: rebuilt by transformers' own scan
        return {}


def _save(path: Path, index: dict[str, Any]) -> None:
    from mlx_agent.files import private_dir, replace_atomically

    with contextlib.suppress(Exception):  # a read-only or full home costs the next worker its half second, no more
        private_dir(path.parent)
        data = json.dumps({folder: encode(structure) for folder, structure in index.items()})
        replace_atomically(path, data.encode(), 0o600)


def remembering(scan: Callable[[Any], Any], path: Path) -> Callable[[Any], Any]:
    """Wrap transformers' scan so a folder scanned once is read from ``path`` by every later process."""
    index = _read(path)
    scanning = False

    def scan_once(module_path: Any) -> Any:
        nonlocal scanning
        key = str(module_path)
        if scanning:  # the scan's own calls for its subfolders
            return scan(module_path)
        if key not in index:
            scanning = True
            try:
                index[key] = scan(module_path)
            finally:
                scanning = False
            scan_once.scanned.append(key)  # type: ignore[attr-defined]
            _save(path, index)
        return index[key]

    scan_once.scanned = []  # type: ignore[attr-defined]  # the folders this process scanned itself
    scan_once.__wrapped__ = scan  # type: ignore[attr-defined]  # transformers' own scan, for whoever inspects it
    return scan_once


class _Finder:
    """Find transformers' import utilities as usual, and wrap the scan once the module has run.

    A meta path finder needs only ``find_spec`` (importlib.abc's base class would cost its import, 17 ms).
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> Any:
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)  # once: the module is imported one time per process
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module
        index = self.path

        def exec_module(module: ModuleType) -> None:
            run(module)
            scan = getattr(module, FUNCTION, None)
            if callable(scan):
                setattr(module, FUNCTION, remembering(scan, index))

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(root: Path | None = None) -> bool:
    """Make this process's import of transformers read the saved index; say whether it will."""
    if MODULE in sys.modules:
        return False  # too late: transformers has already scanned
    try:
        path = index_path(cache_root() if root is None else root)
    except OSError:
        return False
    if path is None:
        return False
    sys.meta_path.insert(0, _Finder(path))
    return True
