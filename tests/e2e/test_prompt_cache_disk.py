"""End to end on a small real home (a tmpfs): a full disk is reported, and keyless chats cannot fill it.

Each test mounts a tmpfs as ``MLX_AGENT_HOME`` (root only; skipped otherwise), serves the tiny model JIT
through the real front and wrapped mlx_lm worker, and fills the disk with a file of zeros as another program
would.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.disk import MIB, disk_space
from tests.conftest import Agent, free_port
from tests.disk_support import tmpfs

pytestmark = pytest.mark.e2e

SAVE_S = 60.0  # how long an unloaded worker may take to save (a bound, not a measure)


@contextlib.contextmanager
def tmpfs_home(tmp_path: Path, size: str) -> Iterator[Agent]:
    """Mount a private tmpfs of ``size``, yield a CLI runner whose home is on it, stop its servers, unmount."""
    with tmpfs(tmp_path, size) as mount:
        home = mount / "home"
        home.mkdir(mode=0o700)
        agent = Agent(home, {**os.environ, "MLX_AGENT_HOME": str(home), "HF_HOME": str(tmp_path / "hf")})
        try:
            yield agent
        finally:
            (mount / "filler").unlink(missing_ok=True)  # room for the stop to remove its files
            for receipt in agent.serve_dir.glob("*.json") if agent.serve_dir.is_dir() else []:
                agent.run("serve", "stop", "--port", receipt.stem)


def fill_to(home: Path, free_bytes: int) -> None:
    """Write zeros beside the home until about ``free_bytes`` are left free (until the disk refuses, with 0)."""
    space = disk_space(home)
    assert space is not None
    left = space.free_bytes - free_bytes if free_bytes else 1 << 40
    with contextlib.suppress(OSError), open(home.parent / "filler", "wb", buffering=0) as fh:
        while left > 0:
            left -= fh.write(b"\0" * min(1 << 16, left))


def chat(port: int, text: str) -> tuple[int, dict[str, Any]]:
    """Send one keyless chat completion; return its status and JSON body."""
    body = json.dumps({"messages": [{"role": "user", "content": text}], "max_tokens": 2}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def health(port: int) -> tuple[int, dict[str, Any]]:
    """Return the front's /health status and body."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as reply:
        return reply.status, json.loads(reply.read())


def prompt_cache_status(agent: Agent) -> dict[str, Any]:
    """Return the first model's ``prompt_cache`` in ``serve status``."""
    cache: dict[str, Any] = agent.run("serve", "status").data["servers"][0]["models"][0]["prompt_cache"]
    return cache


def test_a_full_home_is_reported_and_requests_get_disk_full(tiny_model: Path, tmp_path: Path) -> None:
    """On a full home a request gets 503 disk_full with the numbers, never 502; health and status say why."""
    with tmpfs_home(tmp_path, "16m") as home:
        port = free_port()
        home.launch("--path", str(tiny_model), "--port", str(port), "--jit")
        assert chat(port, "hello")[0] == 200
        assert health(port)[1]["status"] == "ok"
        fill_to(home.home, 0)
        # A worker breaks off once its log needs a new page: a few requests may still fit in the last one.
        answers = [chat(port, f"hello {i}") for i in range(40)]
        failed = [(status, body) for status, body in answers if status != 200]
        assert failed, "every request was answered on a full disk"
        assert {status for status, _ in failed} == {503}, failed[0]
        error = failed[0][1]["error"]
        assert error["code"] == "disk_full" and error["remediation"]
        assert [(d["place"], d["free_bytes"] < d["floor_bytes"], d["low"]) for d in error["disk"]] == [
            ("state", True, True)
        ]
        status, body = health(port)
        assert (status, body["status"], body["disk"][0]["low"]) == (200, "degraded", True)
        server = home.run("serve", "status").data["servers"][0]
        assert server["health"] == "degraded" and "disk_full" in [p["code"] for p in server["problems"]]
        assert server["disk"][0]["low"] and server["disk"][0]["free_bytes"] < server["disk"][0]["floor_bytes"]
        model = server["models"][0]
        assert (model["model_state"], model["last_error"]["code"]) == ("loaded", "disk_full")
        assert model["last_error"]["details"]["disk"][0]["path"].startswith(str(home.home))
        (home.home.parent / "filler").unlink()
        assert chat(port, "hello again")[0] == 200, "the same worker answers once space is freed"


def test_keyless_chats_and_an_unload_stop_saving_at_the_floor(tiny_model: Path, tmp_path: Path) -> None:
    """Twelve keyless chats then an unload on a small home: the save stops at the floor, whole files, no traceback."""
    with tmpfs_home(tmp_path, "12m") as home:
        port = free_port()
        args = ("--path", str(tiny_model), "--port", str(port), "--jit")
        preview = home.run("serve", "start", *args)
        assert preview.data["plan"]["models"][0]["prompt_cache"]["disk_gb"] == 4.0  # the plan keeps what was asked
        assert any("not the 4 GB of --prompt-cache-disk-gb" in w for w in preview.doc["warnings"]), preview.doc
        receipt = home.launch(*args)
        for i in range(12):
            words = " ".join(f"w{i}x{j}" for j in range(100))  # a distinct prompt: an entry of some 300 KB
            status, body = chat(port, f"chat {i}: {words}")
            assert status == 200, body
        before = disk_space(home.home)
        assert before is not None
        fill_to(home.home, before.floor_bytes + MIB)  # room for a few entries above the floor, not for twelve
        unloaded = home.run("serve", "unload", "--port", str(port), "--expected-pid", str(receipt["pid"]))
        assert unloaded.rc == 0, unloaded.stdout
        deadline = time.monotonic() + SAVE_S
        while (kept := prompt_cache_status(home))["last_save"] is None:
            assert time.monotonic() < deadline, "the unloaded worker wrote no save report"
            time.sleep(0.3)
        save = kept["last_save"]
        assert save["saved"] >= 1 and save["skipped"] >= 1 and save["failed"] == 0 and save["stopped"] is None, save
        assert save["saved"] + save["skipped"] >= 10 and kept["entries"] == save["saved"]
        after = disk_space(home.home)
        assert after is not None and after.free_bytes >= after.floor_bytes
        cache = Path(kept["dir"]).parent
        assert sorted(p.name for p in cache.rglob(".*")) == [], "a partial file was left"
        assert kept["limit_bytes"] <= (after.free_bytes + kept["bytes"]) // 2 + 1
        log = Path(home.run("serve", "status").data["servers"][0]["log_path"]).with_suffix(".worker.log")
        text = log.read_text(errors="replace")
        assert "Traceback" not in text
        assert f"{save['skipped']} prompt cache entries not saved" in text
