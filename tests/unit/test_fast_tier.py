"""The fast tier's guard: a fast test that starts a process, uses a socket or imports mlx fails, however it hides it."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import socket
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.fast_tier import declares_fast, guarded

pytestmark = pytest.mark.fast


def test_a_process_started_by_subprocess_fails_the_test() -> None:
    """``subprocess.run`` inside the guard fails the test, naming what it did."""
    with pytest.raises(pytest.fail.Exception, match="started a process"), guarded("t"):
        subprocess.run(["true"], check=True)


def test_a_refusal_the_code_swallows_still_fails_the_test() -> None:
    """Code under test that catches every exception around its spawn cannot hide it from the guard."""
    careless = contextlib.suppress(Exception)  # what code under test may do around its spawn
    with pytest.raises(pytest.fail.Exception, match="started a process"), guarded("t"), careless:
        subprocess.run(["true"], check=True)


def test_an_asyncio_subprocess_fails_the_test() -> None:
    """A process started through asyncio fails the test too."""

    async def spawn() -> None:
        process = await asyncio.create_subprocess_exec("true")
        await process.wait()

    with pytest.raises(pytest.fail.Exception, match="started a process"), guarded("t"):
        asyncio.run(spawn())


def test_binding_or_connecting_a_socket_fails_the_test() -> None:
    """A bound or connected socket is network use: the test fails."""
    with socket.socket() as sock, pytest.raises(pytest.fail.Exception, match=r"\(socket.bind\)"), guarded("t"):
        sock.bind(("127.0.0.1", 0))
    with socket.socket() as sock, pytest.raises(pytest.fail.Exception, match=r"\(socket.connect\)"), guarded("t"):
        sock.connect(("127.0.0.1", 9))


def test_importing_a_runtime_fails_the_test_even_when_it_was_imported_before() -> None:
    """Importing mlx_vlm fails the test, and so does importing an mlx_lm that an earlier test left imported."""
    with pytest.raises(pytest.fail.Exception, match="imported mlx_vlm"), guarded("t"):
        importlib.import_module("mlx_vlm")
    sys.modules["mlx_lm"] = types.ModuleType("mlx_lm")  # as a test of another tier would leave it
    try:
        with pytest.raises(pytest.fail.Exception, match="imported mlx_lm"), guarded("t"):
            importlib.import_module("mlx_lm")
        assert "mlx_lm" in sys.modules  # put back for the tests that come after
    finally:
        del sys.modules["mlx_lm"]


def test_pure_work_and_an_event_loop_pass() -> None:
    """Parsing, an event loop (its self-pipe is a socket pair) and files under tmp pass the guard."""

    async def answer() -> int:
        await asyncio.sleep(0)
        return int(json.loads("42"))

    with guarded("t"):
        assert asyncio.run(answer()) == 42


def test_a_file_is_collected_for_the_tier_by_its_mark(tmp_path: Path) -> None:
    """``-m fast`` collects a file only when its text marks the module, or one of its tests, fast."""
    module, one, plain = tmp_path / "test_a.py", tmp_path / "test_b.py", tmp_path / "test_c.py"
    module.write_text("import pytest\n\npytestmark = pytest.mark.fast\n")
    one.write_text("import pytest\n\n\n@pytest.mark.fast\ndef test_x() -> None:\n    pass\n")
    plain.write_text("import pytest\n\npytestmark = pytest.mark.e2e\n")
    assert declares_fast(module) and declares_fast(one) and not declares_fast(plain)
