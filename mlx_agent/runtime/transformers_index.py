"""Keep transformers' index of its model files between worker starts, instead of rebuilding it in each one.

transformers 5 reads every one of its ~3,300 model source files when it is imported, to learn which names each
exports and which backends they need (``create_import_structure_from_path``), then regroups that by backend
(``spread_import_structure``), twice over for the models folder (once for ``transformers``, once for
``transformers.models``): about half a second of each worker's start on these machines, and the same result
every time for one installed transformers. The seam is ``define_import_structure``, which does both: the first
worker saves what it returned for each folder under the user's cache directory (``$XDG_CACHE_HOME/mlx-agent``,
``~/Library/Caches/mlx-agent`` on macOS, else ``~/.cache/mlx-agent``), named by the sha256 of transformers'
installed ``RECORD`` (which lists every file with its hash) and the models folder's modification time; later
workers read it, and decode only the folders they import. Anything unexpected (no ``RECORD``, an editable
install, a renamed function in a newer transformers, an unreadable or unsafe cache) falls back to transformers'
own work: the index only ever saves time. A save also removes the indexes of installs that are gone or changed.
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
FUNCTION = "define_import_structure"  # the seam: a folder scanned and regrouped by backend (lru-cached by transformers)
FORMAT = 2
NAME = "transformers-index-"


def cache_root() -> Path:
    """Return the user's cache directory for mlx-agent (derived data any worker may rebuild)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "mlx-agent"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "mlx-agent"
    return Path.home() / ".cache" / "mlx-agent"


def installed_package() -> Path | None:
    """Return the folder of the transformers this process would import, or None if there is none."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def index_name(package: Path) -> str | None:
    """Return the index file's name for the transformers at ``package``, or None when no ``RECORD`` names it."""
    records = sorted(package.parent.glob("transformers-*.dist-info/RECORD"))
    if len(records) != 1:
        return None  # an editable or source checkout, or two installs in one folder: nothing names the files
    digest = hashlib.sha256(records[0].read_bytes())
    digest.update(f"{FORMAT}:{package}:{(package / 'models').stat().st_mtime_ns}".encode())
    return f"{NAME}{digest.hexdigest()[:32]}.json"


def encode(structure: Any) -> list[Any]:
    """Write what ``define_import_structure`` returns (backends -> module -> names) as JSON, in its order."""
    out = []
    for backends, modules in structure.items():
        if not isinstance(backends, frozenset) or not isinstance(modules, dict):
            raise TypeError("not an import structure of backends to modules")
        rows = []
        for module, names in modules.items():
            if not isinstance(module, str) or not isinstance(names, set | frozenset):
                raise TypeError("not an import structure of modules to names")
            rows.append([module, sorted(names)])
        out.append([sorted(backends), rows])
    return out


def decode(value: Any) -> dict[frozenset[str], dict[str, set[str]]]:
    """Read back what ``encode`` wrote."""
    return {frozenset(backends): {module: set(names) for module, names in rows} for backends, rows in value}


def _read(path: Path) -> dict[str, Any]:
    from mlx_agent.files import check_private_dir, open_private

    try:
        check_private_dir(path.parent)
        with os.fdopen(open_private(path, os.O_RDONLY), "rb") as fh:
            folders = json.loads(fh.read())["folders"]
    except Exception:  # absent, damaged or not ours: rebuilt by transformers' own scan
        return {}
    return folders if isinstance(folders, dict) else {}


def prune(root: Path, keep: Path) -> None:
    """Remove the other indexes in ``root`` whose transformers is gone or has changed since they were saved."""
    for other in root.glob(f"{NAME}*.json"):
        if other == keep:
            continue
        with contextlib.suppress(Exception):  # unreadable or another's: left as it is
            saved = json.loads(other.read_bytes())
            package = Path(saved["package"]) if isinstance(saved, dict) and "package" in saved else None
            if package is None or not package.is_dir() or index_name(package) != other.name:
                other.unlink()  # an earlier format, an install removed, or one upgraded in place


def _save(path: Path, package: str, folders: dict[str, Any]) -> None:
    from mlx_agent.files import private_dir, replace_atomically

    with contextlib.suppress(Exception):  # a read-only or full home costs the next worker its half second, no more
        private_dir(path.parent)
        data = json.dumps({"package": package, "folders": folders})
        replace_atomically(path, data.encode(), 0o600)
        prune(path.parent, path)


def remembering(define: Callable[..., Any], path: Path, package: Path) -> Callable[..., Any]:
    """Wrap transformers' ``define_import_structure`` (of the install at ``package``) to read and fill ``path``."""
    saved = _read(path)  # encoded; a folder is decoded only when it is asked for
    held: dict[str, Any] = {}  # this process's answers: the same object every call, as lru_cache gives

    def define_once(module_path: Any, prefix: str | None = None) -> Any:
        key = f"{prefix or ''}:{module_path}"
        if key in held:
            return held[key]
        structure = None
        if key in saved:
            with contextlib.suppress(Exception):  # a damaged entry is defined again
                structure = decode(saved[key])
        if structure is None:
            structure = define(module_path) if prefix is None else define(module_path, prefix)  # as it was called
            with contextlib.suppress(TypeError):  # a shape this format does not know is not saved
                saved[key] = encode(structure)  # before the caller adds to it (transformers' __init__ does)
                define_once.defined.append(key)  # type: ignore[attr-defined]
                _save(path, str(package), saved)
        held[key] = structure
        return structure

    define_once.defined = []  # type: ignore[attr-defined]  # the folders this process defined itself
    define_once.__wrapped__ = define  # type: ignore[attr-defined]  # transformers' own, for whoever inspects it
    return define_once


class _Finder:
    """Find transformers' import utilities as usual, and wrap ``define_import_structure`` once the module has run.

    A meta path finder needs only ``find_spec`` (importlib.abc's base class would cost its import, 17 ms).
    """

    def __init__(self, path: Path, package: Path) -> None:
        self.path = path
        self.package = package

    def find_spec(self, fullname: str, path: Any = None, target: ModuleType | None = None) -> Any:
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)  # once: the module is imported one time per process
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module
        index, package = self.path, self.package

        def exec_module(module: ModuleType) -> None:
            run(module)
            define = getattr(module, FUNCTION, None)
            if callable(define):
                setattr(module, FUNCTION, remembering(define, index, package))

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(root: Path | None = None) -> bool:
    """Make this process's import of transformers read the saved index; say whether it will."""
    if MODULE in sys.modules:
        return False  # too late: transformers has already defined its structure
    try:
        package = installed_package()
        name = None if package is None else index_name(package)
    except OSError:
        return False
    if package is None or name is None:
        return False
    sys.meta_path.insert(0, _Finder((cache_root() if root is None else root) / name, package))
    return True
