"""Resolve a runtime to the program that will run, with the versions it brings.

The program is our wrapped entry, the runtime's own module, or an executable from another environment.

Nothing here may depend on PATH at confirm time: an executable whose shebang goes through ``env`` is
bound to the interpreter PATH gave at preview. Every executable is launched through its interpreter
explicitly, under our stdlib-only ``runtime/entries/native_entry.py`` (bound by sha256 like the executable), which
gives it its port from the environment and, where its recipe says so, checks the front's per-launch key.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import mlx_agent
from mlx_agent.errors.commands import RuntimeNotExecutable, RuntimeNotInstalled, RuntimeSymlinkLoop
from mlx_agent.files import sha256_file
from mlx_agent.home import agent_home
from mlx_agent.installed import dist_version, env_site_paths, own_site_paths, package_dir
from mlx_agent.resources import PACKAGE_DIR
from mlx_agent.wire import ENTRY_MODULE

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.records.plan import FileCheck, Recipe, RuntimeRecord

ENTRY_DIR = PACKAGE_DIR / "runtime"
NATIVE_ENTRY = ENTRY_DIR / "entries" / "native_entry.py"  # run by path under another environment's interpreter
NATIVE_LOADS = "api_errors.py"  # the one package module the native entry loads (by path, stdlib only)


# The package's bottom modules the worker runs besides runtime/ (what it imports at any depth; the list is
# checked against the imports by tests/unit/test_layers.py), bound and rechecked like runtime/ itself.
WORKER_MODULES = (
    "accel_rules.py",
    "api_errors.py",
    "bodies.py",
    "disk.py",
    "errors/__init__.py",
    "exiting.py",
    "files.py",
    "identity.py",
    "installed.py",
    "media_kinds.py",
    "resources.py",
    "tool_formats.py",
    "wire.py",
    "worker_contract.py",
    "worker_routes.py",
)


def entry_sources() -> dict[str, str]:
    """Return the sha256 of each source file of the wrapped entry, keyed by its package-relative name.

    These are its Python modules (runtime/ at any depth, and ``WORKER_MODULES``) and its bundled kernel files
    (``runtime/accel/kernels/``), so a changed kernel source or error table makes a plan stale.
    """
    files = [*ENTRY_DIR.rglob("*.py"), *(p for p in (ENTRY_DIR / "accel" / "kernels").rglob("*") if p.is_file())]
    files += [PACKAGE_DIR / name for name in WORKER_MODULES]
    return {
        p.relative_to(ENTRY_DIR.parent).as_posix(): sha256_file(p)
        for p in sorted(set(files))
        if "__pycache__" not in p.parts
    }


def runtime_sources(recipe: Recipe) -> dict[str, str]:
    """Return the sha256 of the runtime modules the entry relies on (``patched_modules`` globs), by name."""
    package = recipe["package"]
    root = package_dir(package, None)
    if root is None:
        return {}
    files = sorted({p for pattern in recipe.get("patched_modules", []) for p in root.glob(pattern) if p.is_file()})
    return {f"{package}/{p.relative_to(root).as_posix()}": sha256_file(p) for p in files}


def interpreter_sha256(interpreter: str) -> str:
    """Return the sha256 of the interpreter binary a path names (through its links)."""
    return sha256_file(Path(interpreter).resolve())


def reviewed_executable(argv0: str) -> str:
    """Return the file a worker's argv[0] leads to now, through every link: what the front will start it by.

    A venv's ``bin/python`` is a link; the worker is started by the file it resolved to at review with argv[0]
    kept (the venv is found from argv[0]), so a link swapped after confirm is never followed, and each load
    rechecks that the links still lead there (``runtime_checks``' ``via``).
    """
    return os.path.realpath(argv0)


def runtime_checks(runtime: RuntimeRecord) -> list[FileCheck]:
    """Return the files every worker load rechecks by content.

    These are the interpreter (with the links that lead to it), our entry, the runtime's modules, and for an
    executable from another environment the executable and the native entry it runs under.
    """
    checks: list[FileCheck] = []
    named: list[tuple[Path, str]] = []
    interpreter = runtime.get("interpreter")
    via = interpreter if runtime.get("interpreter_sha256") and interpreter else None
    if via:
        named.append((Path(reviewed_executable(via)), str(runtime["interpreter_sha256"])))
    if runtime.get("executable_sha256") and runtime.get("executable"):
        named.append((Path(str(runtime["executable"])), str(runtime["executable_sha256"])))
    if runtime.get("native_entry_sha256"):
        named.append((NATIVE_ENTRY, str(runtime["native_entry_sha256"])))
    named += [(PACKAGE_DIR / name, digest) for name, digest in (runtime.get("entry_sources") or {}).items()]
    for name, digest in (runtime.get("runtime_sources") or {}).items():
        package, _, rest = name.partition("/")
        root = package_dir(package, None)
        if root is not None:
            named.append((root / rest, digest))
    for path, digest in named:
        try:
            size = path.stat().st_size
        except OSError:
            size = -1
        checks.append({"path": str(path), "sha256": digest, "size": max(size, 0)})
    if via:
        checks[0]["via"] = via  # the interpreter's check: its links must still lead to the bound file
    return checks


def configured_executable(name: str) -> str | None:
    """Return the executable ``$MLX_AGENT_HOME/runtimes.json`` configures for a runtime, if any."""
    path = agent_home() / "runtimes.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RuntimeNotInstalled(f"{path} is unreadable: {exc}", details={"path": str(path)}) from exc
    entry = config.get(name) if isinstance(config, dict) else None
    exe = entry.get("executable") if isinstance(entry, dict) else None
    return exe if isinstance(exe, str) else None


def _resolve_file(raw: str) -> Path:
    given = Path(raw)
    if not given.is_absolute():
        raise RuntimeNotInstalled(f"runtime executable {raw} is not an absolute path", details={"executable": raw})
    try:
        exe = given.resolve(strict=True)
    except FileNotFoundError:
        raise RuntimeNotInstalled(f"runtime executable {raw} does not exist", details={"executable": raw}) from None
    except RuntimeError as exc:  # Python 3.11 reports a symlink loop this way
        raise RuntimeSymlinkLoop(f"runtime executable {raw}: {exc}", details={"executable": raw}) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RuntimeSymlinkLoop(
                f"runtime executable {raw} is a symlink loop", details={"executable": raw}
            ) from None
        raise RuntimeNotInstalled(f"runtime executable {raw}: {exc}", details={"executable": raw}) from exc
    if not exe.is_file() or not os.access(exe, os.X_OK):
        raise RuntimeNotExecutable(
            f"runtime executable {exe} is not an executable file", details={"executable": str(exe)}
        )
    return exe


def _interpreter(exe: Path) -> tuple[Path | None, list[str]]:
    """Return the interpreter a script's shebang names and the argv prefix that launches it PATH-free.

    The prefix runs the script under the native entry: ``[interpreter, *its shebang options, entry, script]``.
    """
    with open(exe, "rb") as fh:
        first = fh.readline(4096)
    words = first[2:].decode("utf-8", "replace").split() if first.startswith(b"#!") else []
    if not words:
        return None, [str(exe)]
    if os.path.basename(words[0]) == "env":
        import shutil  # lazily: it brings compression modules, and only env shebangs need which()

        name = next((w for w in words[1:] if not w.startswith("-")), None)
        found = shutil.which(name) if name else None
        if found is None:
            raise RuntimeNotInstalled(
                f"{exe} runs {name!r} through env, which is not on PATH", details={"executable": str(exe)}
            )
        interpreter, options = Path(found).absolute(), []
    else:
        interpreter, options = Path(words[0]), words[1:]
    return interpreter, [str(interpreter), *options, str(NATIVE_ENTRY), str(exe)]


def _native(recipe: Recipe, raw: str, source: str) -> dict[str, Any]:
    exe = _resolve_file(raw)
    interpreter, prefix = _interpreter(exe)
    paths = env_site_paths(interpreter) if interpreter is not None else []
    versions = {dep: dist_version(dep, paths) for dep in recipe["dependencies"]}
    if versions.get(recipe["distribution"]) is None:
        raise RuntimeNotInstalled(
            f"{exe} does not come with {recipe['distribution']} installed beside its interpreter",
            details={"executable": str(exe), "interpreter": str(interpreter) if interpreter else None},
        )
    record: dict[str, Any] = {
        "launcher": "native",
        "executable": str(exe),
        "executable_from": source,
        "executable_sha256": sha256_file(exe),
        "native_entry_sha256": sha256_file(NATIVE_ENTRY),
        # The native entry loads api_errors.py beside it by path for its error answers: bound like the entry.
        "entry_sources": {NATIVE_LOADS: sha256_file(PACKAGE_DIR / NATIVE_LOADS)},
        "interpreter": str(interpreter) if interpreter else None,
        "argv_prefix": prefix,
        "versions": versions,
        "adapter_enabled": False,
    }
    if interpreter is not None:  # bound like ours: the worker runs it, by the file it leads to now
        try:
            record["interpreter_sha256"] = interpreter_sha256(str(interpreter))
        except OSError as exc:
            raise RuntimeNotInstalled(
                f"{exe} runs {interpreter}, which cannot be read: {exc.strerror or exc}",
                details={"executable": str(exe), "interpreter": str(interpreter)},
            ) from None
    return record


def runtime_site_paths(name: str, executable: str | None) -> list[str] | None:
    """Return where a runtime's packages live: another environment's site-packages, or None for ours."""
    raw = executable or configured_executable(name)
    if raw is None:
        return None
    interpreter, _ = _interpreter(_resolve_file(raw))
    return env_site_paths(interpreter) if interpreter is not None else []


def resolve_runtime(name: str, recipe: Recipe, recipe_sha: str, executable: str | None) -> RuntimeRecord:
    """Return the plan's runtime record: recipe, launcher, interpreter and versions."""
    base: RuntimeRecord = {"name": name, "recipe_sha256": recipe_sha}
    if executable is not None:
        return {**base, **_native(recipe, executable, "option")}  # type: ignore[typeddict-item]
    configured = configured_executable(name)
    if configured is not None:
        return {**base, **_native(recipe, configured, "runtimes.json")}  # type: ignore[typeddict-item]
    paths = own_site_paths()
    versions = {dep: dist_version(dep, paths) for dep in recipe["dependencies"]}
    if versions.get(recipe["distribution"]) is None or package_dir(recipe["package"], None) is None:
        raise RuntimeNotInstalled(
            f"runtime {name} ({recipe['distribution']}) is not installed for {sys.executable}",
            details={"runtime": name, "interpreter": sys.executable},
        )
    interpreter = str(Path(sys.executable).absolute())
    if recipe.get("wrapper"):
        return {
            "name": name,
            "recipe_sha256": recipe_sha,
            "launcher": "wrapped",
            "interpreter": interpreter,
            "interpreter_sha256": interpreter_sha256(interpreter),
            "module": ENTRY_MODULE,
            "entry_sources": entry_sources(),
            "runtime_sources": runtime_sources(recipe),
            "versions": {**versions, "mlx-agent": mlx_agent.__version__},
            "adapter_enabled": bool(recipe["capabilities"].get("adapter")),
        }
    return {
        "name": name,
        "recipe_sha256": recipe_sha,
        "launcher": "module",
        "interpreter": interpreter,
        "interpreter_sha256": interpreter_sha256(interpreter),
        "module": recipe["native_module"],
        "runtime_sources": runtime_sources(recipe),
        "versions": versions,
        "adapter_enabled": False,
    }
