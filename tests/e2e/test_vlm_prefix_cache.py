"""End to end: mlx-vlm's automatic prefix cache, turned on by the plan, owned by the front.

A tiny Qwen2-VL model is served by the real mlx-vlm worker through `serve start --prefix-cache-gb 0` with two
API keys. The evidence is mlx-vlm's own APC report, read through the front with the control token: a key's
repeated prompt is a hit; the other key's same prompt is not, even when it sends the first key's tenant header;
a key holder sees only the planned figures; a reset needs the control token and empties the cache. Without the
option the same model says ``enabled: false`` (the session's ``plain_vlm``, which only reads here).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from mlx_agent.cli.top_view import render
from mlx_agent.gateway.cache_tenant import tenant_of
from mlx_agent.gateway.door.security import key_id
from mlx_agent.port_files import PortFiles
from tests.conditions import wait_until
from tests.conftest import LAUNCHER, Agent, free_port
from tests.e2e.vision_support import ServedVlm
from tests.gateway_support import private_file

pytestmark = pytest.mark.e2e

# Long enough to fill several of mlx-vlm's 16-token blocks.
PROMPT = " ".join(f"word{i} and more words to cache number {i}" for i in range(24))


def call(url: str, method: str = "GET", token: str | None = None, **headers: str) -> tuple[int, Any]:
    """Return the status and parsed body of a request to the front."""
    body = None if method == "GET" else b"{}"
    request = urllib.request.Request(url, data=body, method=method, headers={"Content-Type": "application/json"})
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def chat(base: str, key: str, **headers: str) -> None:
    """Send the cached prompt as ``key`` (with ``headers``) and expect an answer."""
    body = {
        "model": "tiny-qwen2-vl",
        "max_tokens": 2,
        "temperature": 0,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    request = urllib.request.Request(
        base + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}", **headers},
    )
    with urllib.request.urlopen(request, timeout=300) as reply:
        assert reply.status == 200


def top_snapshot(agent: Agent) -> dict[str, Any]:
    """Return one ``serve top --json`` snapshot."""
    argv = [sys.executable, str(LAUNCHER), "serve", "top", "--json", "--iterations", "1"]
    done = subprocess.run(argv, env=agent.env, capture_output=True, text=True, timeout=60, check=True)
    snapshot: dict[str, Any] = json.loads(done.stdout.splitlines()[0])
    return snapshot


def serve(agent: Agent, model: Path, *options: str) -> tuple[str, int, dict[str, Any]]:
    """Serve ``model`` with mlx-vlm and ``options``; return the front's URL, its port and the receipt."""
    port = free_port()
    receipt = agent.launch("--path", str(model), "--runtime", "mlx-vlm", "--port", str(port), *options)
    return f"http://127.0.0.1:{port}", port, receipt


def test_a_keys_prefix_hits_only_its_own_cache_and_reset_empties_it(
    agent: Agent, tiny_vlm: Path, tmp_path: Path
) -> None:
    """Same key: a hit; other key (even with the first key's tenant header): none; reset: control token, empty."""
    keys = private_file(tmp_path / "keys", "k-1\nk-2\n")
    base, port, receipt = serve(agent, tiny_vlm, "--prefix-cache-gb", "0", "--api-key-file", str(keys))
    try:
        model = receipt["plan"]["models"][0]
        assert model["prefix_cache"] == {"block_size": 16, "num_blocks": 2048, "disk_path": None, "disk_max_gb": 0.0}
        token = Path(receipt["plan"]["front"]["token_path"]).read_text().strip()

        def report() -> dict[str, Any]:
            status, doc = call(base + "/v1/cache/stats", token=token)
            assert status == 200, doc
            entry: dict[str, Any] = doc["data"][0]
            assert entry["enabled"] and entry["loaded"], entry
            return dict(entry["stats"])

        chat(base, "k-1")
        first = report()
        chat(base, "k-1")
        again = report()
        assert again["lookups_hit"] > first["lookups_hit"] and again["matched_tokens"] > first["matched_tokens"]
        # the other key, even naming the first key's tenant (the front drops the client's header), misses
        chat(base, "k-2", **{"X-APC-Tenant": tenant_of(key_id("k-1")), "X-Tenant-Id": tenant_of(key_id("k-1"))})
        other = report()
        assert (other["lookups_hit"], other["matched_tokens"]) == (again["lookups_hit"], again["matched_tokens"])
        assert other["lookups_miss"] > again["lookups_miss"]

        shown = agent.run("serve", "status", "--port", str(port)).data["servers"][0]["models"][0]["caches"]
        assert shown["prefix"]["stats"]["lookups_hit"] == other["lookups_hit"] and shown["vision"] == {"size": 20}
        assert other["lookups_hit"] > 0
        top = top_snapshot(agent)["servers"][0]["models"][0]["caches"]
        assert top["prefix"]["lookups_hit"] == other["lookups_hit"] and top["vision_cache_size"] == 20
        drawn = Console(width=220, record=True)
        drawn.print(render(top_snapshot(agent), 220))
        assert f"apc {other['lookups_hit']} hit {other['pool_used']}/2048 blk, vision 20" in drawn.export_text()

        status, doc = call(base + "/v1/cache/stats", token="k-2")  # a key holder: the planned figures only
        assert status == 200 and "stats" not in doc["data"][0], doc
        assert doc["data"][0]["num_blocks"] == 2048
        assert call(base + "/v1/cache/reset", "POST", token="k-1")[0] == 401
        status, doc = call(base + "/v1/cache/reset", "POST", token=token)
        assert status == 200 and doc["reset"] is True and doc["data"][0]["disk_kept"] is False, doc
        empty = report()
        assert (empty["pool_used"], empty["lookups_hit"], empty["matched_tokens"]) == (0, 0, 0)
        chat(base, "k-1")  # the key's prefix is gone: a miss again
        assert report()["lookups_hit"] == 0
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def test_without_the_option_the_cache_is_off(plain_vlm: ServedVlm) -> None:
    """A model served without --prefix-cache-gb says enabled: false, with the option to turn it on."""
    agent, base, port, receipt = plain_vlm.agent, plain_vlm.base_url, plain_vlm.port, plain_vlm.receipt
    assert receipt["plan"]["models"][0]["prefix_cache"] is None
    assert receipt["plan"]["models"][0]["worker"]["env"]["APC_ENABLED"] == "0"
    status, doc = call(base + "/v1/cache/stats", token="local")
    assert status == 200 and doc["data"][0]["enabled"] is False and "--prefix-cache-gb" in doc["data"][0]["reason"]
    shown = agent.run("serve", "status", "--port", str(port)).data["servers"][0]["models"][0]["caches"]
    assert shown["prefix"]["enabled"] is False and shown["vision"] == {"size": 20}
    human = agent.run("serve", "status", "--port", str(port), check_json=False)
    assert "prefix cache off (--prefix-cache-gb); vision cache holds up to 20" in " ".join(human.stdout.split())


def test_the_disk_copy_lives_beside_the_receipt_not_in_mlx_vlms_home(
    agent: Agent, tiny_vlm: Path, tmp_path: Path
) -> None:
    """With --prefix-cache-gb 1 mlx-vlm writes its blocks under the port's files, never its own cache home."""
    vlm_home = tmp_path / "mlx-vlm-home"
    agent.env["MLX_VLM_CACHE_HOME"] = str(vlm_home)  # where mlx-vlm's default disk path would be
    base, port, receipt = serve(agent, tiny_vlm, "--prefix-cache-gb", "1")
    try:
        disk = PortFiles(agent.serve_dir, port).prefix_cache(0)
        assert receipt["plan"]["models"][0]["prefix_cache"]["disk_path"] == str(disk)
        token = Path(receipt["plan"]["front"]["token_path"]).read_text().strip()
        chat(base, "local")
        wait_until(  # mlx-vlm's writer thread stores the blocks after the reply
            lambda: call(base + "/v1/cache/stats", token=token)[1]["data"][0]["stats"]["disk_writes"],
            "mlx-vlm wrote prefix-cache blocks to disk",
            timeout=120,
        )
        assert any(path.is_file() for path in disk.rglob("*"))
        assert not vlm_home.exists()
        status, doc = call(base + "/v1/cache/reset", "POST", token=token)
        assert status == 200 and doc["data"][0]["disk_kept"] is True
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0
