"""The fast tier: tests that start no process, open no socket and import no mlx, and the guard that holds them to it.

A test is in the tier when it carries the ``fast`` mark (a module says ``pytestmark = pytest.mark.fast``, or a
test in a module of mixed tests says ``@pytest.mark.fast``); ``bash scripts/test --fast`` (``pytest -m fast``)
runs the tier alone. While a fast test's fixtures are set up and while it runs (not at its teardown, where the
last test of a process also tears down the session's fixtures), starting a process (``subprocess``, ``asyncio``
subprocesses, ``multiprocessing``, ``os.fork``, ``os.posix_spawn``, ``os.system``), binding or connecting a
socket, or importing mlx, mlx_lm or mlx_vlm fails it, even where the code under test catches the refusal. A module
with fast tests that imports mlx when it is collected fails its collection. ``MLX_AGENT_FAST_GUARD=all`` guards
every test, which is how the pure tests were found (each unit module run alone under it; docs/contributing.md).
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import importlib.abc
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MARK = "fast"
# The heavy runtimes: importing one costs seconds, and a test that needs one needs a model too.
RUNTIMES = ("mlx", "mlx_lm", "mlx_vlm")
# Every way this interpreter starts a process: subprocess (asyncio's too) holds its own name for
# _posixsubprocess.fork_exec, which multiprocessing calls by the module's.
SPAWNS: tuple[tuple[Any, str], ...] = (
    (subprocess, "_fork_exec"),
    (_posixsubprocess, "fork_exec"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
)
# A socket of its own (asyncio's self-pipe, a socketpair) is no network; binding or connecting one is.
SOCKET_CALLS = ("bind", "connect", "connect_ex", "sendto")


def guards_all() -> bool:
    """Return whether every test is guarded (``MLX_AGENT_FAST_GUARD=all``: finding the pure modules)."""
    return os.environ.get("MLX_AGENT_FAST_GUARD") == "all"


def is_fast(item: pytest.Item) -> bool:
    """Return whether ``item`` is held to the fast tier's rules."""
    return guards_all() or item.get_closest_marker(MARK) is not None


def is_runtime(name: str) -> bool:
    """Return whether module ``name`` is mlx, mlx_lm, mlx_vlm or one of their submodules."""
    return name.split(".", 1)[0] in RUNTIMES


class FastTierViolation(Exception):
    """A fast-tier test did what the tier excludes (deliberately not an OSError, which code under test catches)."""


class _RefuseRuntimes(importlib.abc.MetaPathFinder):
    """Refuses to import mlx, mlx_lm and mlx_vlm (the guard hides the ones already imported)."""

    def __init__(self, refuse: Callable[[str], FastTierViolation]) -> None:
        self.refuse = refuse

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> None:
        if is_runtime(fullname):
            raise self.refuse(f"imported {fullname}")


@contextlib.contextmanager
def guarded(nodeid: str) -> Iterator[None]:
    """Fail the test ``nodeid`` if, inside the block, it starts a process, uses a socket or imports mlx."""
    seen: list[str] = []

    def refuse(what: str) -> FastTierViolation:
        seen.append(what)
        return FastTierViolation(f"a fast-tier test {what}: {nodeid}")

    def blocker(what: str) -> Callable[..., Any]:
        def blocked(*args: Any, **kwargs: Any) -> Any:
            raise refuse(what)

        return blocked

    with pytest.MonkeyPatch.context() as patch:
        for owner, name in SPAWNS:
            if hasattr(owner, name):
                patch.setattr(owner, name, blocker(f"started a process ({owner.__name__}.{name})"))
        for name in SOCKET_CALLS:
            patch.setattr(socket.socket, name, blocker(f"used a socket (socket.{name})"))
        for name in [name for name in sys.modules if is_runtime(name)]:
            patch.delitem(sys.modules, name)  # so that importing one again reaches the finder (restored after)
        finder = _RefuseRuntimes(refuse)
        sys.meta_path.insert(0, finder)
        try:
            yield
        except BaseException:
            if seen:
                pytest.fail(f"fast tier: {'; '.join(seen)} (drop its fast mark, or make it pure)")
            raise
        finally:
            sys.meta_path.remove(finder)
    if seen:
        pytest.fail(f"fast tier: {'; '.join(seen)} (drop its fast mark, or make it pure)")


def holds_fast_tests(nodes: Sequence[pytest.Item | pytest.Collector]) -> bool:
    """Return whether a module's collected ``nodes`` include a test of the fast tier (or every test is guarded)."""
    return guards_all() or any(node.get_closest_marker(MARK) is not None for node in nodes)


def declares_fast(path: Path) -> bool:
    """Return whether a test file's text marks the module, or one of its tests, fast (read without importing it)."""
    return f"pytest.mark.{MARK}" in path.read_text(encoding="utf-8")
