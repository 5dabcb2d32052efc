"""mlx-vlm's prefix cache in the plan (``--prefix-cache-gb``) and the front's tenant rule, without processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from mlx_agent.cli.render import caches_line
from mlx_agent.cli.top_view import vlm_caches
from mlx_agent.errors.commands import UnsupportedRuntime
from mlx_agent.gateway.cache_tenant import SHARED_TENANT, TENANT_HEADER, tenant_headers, tenant_of
from mlx_agent.gateway.door.security import OPERATOR, Guard, key_id
from mlx_agent.plan.decoding import prefix_cache_env, prefix_cache_plan
from mlx_agent.plan.recipes import load_recipe
from mlx_agent.plan.requests import ModelRequest
from mlx_agent.port_files import PortFiles
from mlx_agent.records.plan import Recipe
from mlx_agent.supervise.top import caches_view

pytestmark = pytest.mark.fast

DISK = PortFiles(Path("/srv/state"), 8083).prefix_cache(1)
PORT = 8083
TOKEN = "control-token"


def recipe(name: str) -> Recipe:
    """Return a shipped recipe."""
    return load_recipe(name)[0]


def test_the_option_records_the_cache_with_its_disk_beside_the_receipt() -> None:
    """--prefix-cache-gb N is mlx-vlm's pool and N GB on disk in the port's files; 0 keeps it in memory only."""
    assert str(DISK) == "/srv/state/8083.worker-1.apc"
    on = prefix_cache_plan(ModelRequest(prefix_cache_gb=2.5), recipe("mlx-vlm"), DISK)
    assert on == {"block_size": 16, "num_blocks": 2048, "disk_path": str(DISK), "disk_max_gb": 2.5}
    memory = prefix_cache_plan(ModelRequest(prefix_cache_gb=0), recipe("mlx-vlm"), DISK)
    assert memory is not None and memory["disk_path"] is None
    assert prefix_cache_plan(ModelRequest(), recipe("mlx-vlm"), DISK) is None


@pytest.mark.parametrize("runtime", ["mlx_lm", "mlx-vlm-embed"])
def test_a_runtime_without_the_cache_refuses_the_option(runtime: str) -> None:
    """mlx_lm and the embedding recipe have no such cache: unsupported_runtime naming the flag."""
    with pytest.raises(UnsupportedRuntime, match="--prefix-cache-gb"):
        prefix_cache_plan(ModelRequest(prefix_cache_gb=1), recipe(runtime), DISK)


def test_the_worker_environment_turns_the_cache_on_or_explicitly_off() -> None:
    """On: APC_* as planned and no default tenant; off: APC_ENABLED=0 (a user's own =1 never leaks in)."""
    vlm = recipe("mlx-vlm")
    record = prefix_cache_plan(ModelRequest(prefix_cache_gb=2.5), vlm, DISK)
    env = prefix_cache_env(vlm, record)
    assert env["APC_ENABLED"] == "1" and env["APC_DISK_PATH"] == str(DISK) and env["APC_DISK_MAX_GB"] == "2.5"
    assert (env["APC_DISK_ENABLED"], env["APC_DEFAULT_TENANT"], env["APC_NUM_BLOCKS"]) == ("1", "", "2048")
    memory = prefix_cache_env(vlm, prefix_cache_plan(ModelRequest(prefix_cache_gb=0), vlm, DISK))
    assert (memory["APC_DISK_ENABLED"], memory["APC_DISK_PATH"]) == ("0", "")
    assert prefix_cache_env(vlm, None) == {"APC_ENABLED": "0"}
    assert prefix_cache_env(recipe("mlx_lm"), None) == {}


def test_each_key_is_its_own_tenant_and_no_keys_is_one() -> None:
    """Two keys get two tenants, neither the shared one; the tenant names the key's id, never the key."""
    one, two = tenant_of(key_id("k-1")), tenant_of(key_id("k-2"))
    assert len({one, two, SHARED_TENANT}) == 3 and "k-1" not in one
    assert tenant_of(None) == SHARED_TENANT


def seen(guard: Guard, path: str, **headers: str) -> tuple[int, dict[str, str], bool]:
    """Return the status, the tenant header the handler would send to a worker, and whether it ran as operator."""
    found: dict[str, object] = {}

    async def handler(request: web.Request) -> web.StreamResponse:
        found.update(tenant=tenant_headers(), operator=bool(request.get(OPERATOR)))
        return web.Response()

    request = make_mocked_request("GET", path, headers={"Host": f"127.0.0.1:{PORT}", **headers})
    reply = asyncio.run(guard.check(request, handler))
    return reply.status, found.get("tenant", {}), bool(found.get("operator"))  # type: ignore[return-value]


def test_the_tenant_comes_from_the_key_never_from_the_clients_header() -> None:
    """A key's request names its own tenant whatever X-APC-Tenant it sends; the next request on the task resets."""
    guard = Guard(PORT, 1 << 20, TOKEN, ["k-1", "k-2"], ["GET"])
    forged = {TENANT_HEADER: tenant_of(key_id("k-1")), "X-Tenant-Id": tenant_of(key_id("k-1"))}
    status, tenant, _ = seen(guard, "/v1/chat/completions", Authorization="Bearer k-2", **forged)
    assert (status, tenant) == (200, {TENANT_HEADER: tenant_of(key_id("k-2"))})
    status, tenant, _ = seen(guard, "/health", **forged)
    assert (status, tenant) == (200, {TENANT_HEADER: SHARED_TENANT})
    status, tenant, _ = seen(Guard(PORT, 1 << 20, TOKEN, None, ["GET"]), "/v1/chat/completions", **forged)
    assert (status, tenant) == (200, {TENANT_HEADER: SHARED_TENANT})


def test_the_control_token_reads_the_stats_as_the_operator_and_a_key_does_not() -> None:
    """/v1/cache/stats takes the control token in place of a key, marked operator; a key is not the operator."""
    guard = Guard(PORT, 1 << 20, TOKEN, ["k-1"], ["GET"])
    assert seen(guard, "/v1/cache/stats", Authorization=f"Bearer {TOKEN}")[::2] == (200, True)
    assert seen(guard, "/v1/cache/stats", Authorization="Bearer k-1")[::2] == (200, False)
    assert seen(guard, "/v1/chat/completions", Authorization=f"Bearer {TOKEN}")[0] == 401


def test_status_and_top_say_what_the_worker_reported_of_both_caches() -> None:
    """The status line and top's cell give the prefix cache's blocks and hits, or say it is off, and the vision size."""
    report = {"pool_used": 3, "num_blocks": 2048, "lookups_hit": 2, "lookups_miss": 1, "matched_tokens": 48}
    caches = {
        "prefix": {"enabled": True, "loaded": True, "stats": {**report, "resident_bytes": 2048}},
        "vision": {"size": 7},
    }
    line = caches_line(caches)
    assert "3/2048 blocks" in line and "2 hits 1 misses, 48 tokens matched" in line and "up to 7 images'" in line
    assert caches_line({"prefix": {"enabled": False}, "vision": {"size": 20}}).startswith("prefix cache off")
    assert vlm_caches(caches_view(caches)) == "apc 2 hit 3/2048 blk, vision 7"
    idle = caches_view({"prefix": {"enabled": True, "loaded": False}, "vision": {"size": 20}})
    assert vlm_caches(idle) == "apc idle, vision 20"
    assert vlm_caches(caches_view(None)) == "-"
