"""``GET /v1/cache/stats`` and ``POST /v1/cache/reset``: mlx-vlm's automatic prefix cache (APC), per model.

A model's plan turns the cache on with ``--prefix-cache-gb`` (``prefix_cache`` in the plan: its worker's
``APC_*`` environment); every other model answers ``enabled: false`` with the reason, from the front alone.
For a model with the cache, the front asks its worker (mlx-vlm's own endpoints, on its private socket) when
one is loaded, and never loads one for this: an unloaded model answers its planned figures, ``loaded: false``.

Who sees what: mlx-vlm counts over every tenant (``cache_tenant``: one per API key), so its counters and fill
(hits, misses, matched and stored tokens, blocks and bytes in use, rejects) move with other keys' traffic and
would tell a key holder when and how much others send. With API keys in use, a key holder gets the planned
figures only (``PLANNED``); the control token (``security.OPERATOR_PATHS``) and a server without keys (one
trust domain) get mlx-vlm's whole report.

* stats: any API key holder; ``?model=NAME`` for one model (404 ``model_not_found`` otherwise);
* reset: only with the control token (``security.CONTROL_PATHS``), as the ``/mlx-agent/`` endpoints: a reset
  drops every key's cached prefixes. mlx-vlm's reset clears the blocks in memory and its counters, not its
  copy on disk (``apc.APCManager.clear``): the answer says ``disk_kept`` where the plan keeps one.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from aiohttp import web

from mlx_agent.gateway.door.http_errors import json_response
from mlx_agent.gateway.door.security import OPERATOR
from mlx_agent.gateway.model_kinds import kind_of
from mlx_agent.gateway.models.fleet import Fleet
from mlx_agent.gateway.models.lifecycle import Lifecycle

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.records.front import ModelCaches

OFF = "the plan did not turn mlx-vlm's automatic prefix cache on for this model (--prefix-cache-gb)"
STATS_PATH = "/v1/cache/stats"
RESET_PATH = "/v1/cache/reset"
WORKER_TIMEOUT_S = 10.0
STATUS_TIMEOUT_S = 0.3  # the control status is read within a second (supervise/front.py): a busy worker is skipped
# What any key holder may see of a model's cache: what the plan set, never what other keys' traffic did.
PLANNED = ("block_size", "num_blocks", "disk_max_gb")


def planned(model: Lifecycle) -> dict[str, Any] | None:
    """Return the plan's prefix cache record of ``model`` (None: off)."""
    record = model.model.get("prefix_cache")
    return dict(record) if isinstance(record, dict) else None


async def worker_cache(
    model: Lifecycle, path: str, method: str = "GET", timeout_s: float = WORKER_TIMEOUT_S
) -> dict[str, Any] | None:
    """Return mlx-vlm's answer on ``path`` from the model's loaded worker, or None without one (nothing loads)."""
    worker = model.worker if model.state == "loaded" else None
    if worker is None:
        return None
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with worker.session.request(method, worker.base_url + path, timeout=timeout) as resp:
            doc = json.loads(await resp.read()) if resp.status == 200 else None
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


async def cache_figures(model: Lifecycle, *, full: bool, timeout_s: float = WORKER_TIMEOUT_S) -> dict[str, Any]:
    """Return one model's entry: its plan's figures, and mlx-vlm's own when ``full`` and its worker is loaded."""
    entry: dict[str, Any] = {"model": model.name, "kind": kind_of(model.model) or "text"}
    record = planned(model)
    if record is None:
        return {**entry, "enabled": False, "reason": OFF}
    entry.update({"enabled": True, **{k: record[k] for k in PLANNED}})
    report = await worker_cache(model, STATS_PATH, timeout_s=timeout_s)
    entry["loaded"] = report is not None
    if full and report is not None:
        entry["stats"] = {k: v for k, v in report.items() if k != "enabled"}
    return entry


async def model_caches(model: Lifecycle) -> ModelCaches | None:
    """Return an mlx-vlm chat model's caches for the control status (None for any other model).

    The prefix cache as the control token sees it; the vision feature cache by its size only: mlx-vlm keeps
    its fill (``len`` of its ``VisionFeatureCache``) inside the worker and reports it on no endpoint.
    """
    size = model.model.get("vision_cache_size")
    if size is None:
        return None
    prefix = await cache_figures(model, full=True, timeout_s=STATUS_TIMEOUT_S)
    return {"prefix": prefix, "vision": {"size": size}}


class CacheApi:
    """The handlers of the two cache endpoints (module docstring)."""

    def __init__(self, fleet: Fleet, private: bool) -> None:
        self.fleet = fleet
        self.private = private  # API keys are in use: key holders see the planned figures only

    def _models(self, request: web.Request) -> list[Lifecycle]:
        name = request.query.get("model")
        return self.fleet.models if name is None else [self.fleet.route(name)]

    async def stats(self, request: web.Request) -> web.Response:
        """Answer each model's cache figures (what the caller may see of them: module docstring)."""
        full = not self.private or bool(request.get(OPERATOR))
        data = [await cache_figures(m, full=full) for m in self._models(request)]
        return json_response({"object": "list", "data": data})

    async def reset(self, request: web.Request) -> web.Response:
        """Clear each loaded model's cache in memory (its worker's own reset); say what was reset."""
        data = []
        for model in self._models(request):
            record = planned(model)
            if record is None:
                data.append({"model": model.name, "enabled": False, "reset": False, "reason": OFF})
                continue
            done = await worker_cache(model, RESET_PATH, "POST")
            reset = done is not None and done.get("status") == "cleared"
            data.append(
                {"model": model.name, "enabled": True, "reset": reset, "disk_kept": record["disk_path"] is not None}
            )
        return json_response({"reset": any(d["reset"] for d in data), "data": data})
