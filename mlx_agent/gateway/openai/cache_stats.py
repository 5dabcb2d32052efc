"""``GET /v1/cache/stats`` and ``POST /v1/cache/reset``: mlx-vlm's prefix-cache endpoints, answered per model.

mlx-vlm's server answers these for its automatic prefix cache (APC), which it runs only when ``APC_ENABLED=1``
is in its environment; no plan here sets it (its disk cache would live outside the reviewed places, and mlx-vlm
lets a client pick another tenant's cache with a header). So no worker of this server has such a cache, and the
front answers both itself, per model, saying so: nothing reaches a worker, nothing loads.

* stats: any API key holder; ``?model=NAME`` for one model (404 ``model_not_found`` otherwise);
* reset: only with the control token (``security.CONTROL_PATHS``), as the ``/mlx-agent/`` endpoints: a reset
  drops every client's cached prefixes.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from mlx_agent.gateway.door.http_errors import json_response
from mlx_agent.gateway.model_kinds import kind_of
from mlx_agent.gateway.models.fleet import Fleet
from mlx_agent.gateway.models.lifecycle import Lifecycle

REASON = "no worker of this server runs mlx-vlm's automatic prefix cache (no plan sets APC_ENABLED)"


def _entry(model: Lifecycle) -> dict[str, Any]:
    return {"model": model.name, "kind": kind_of(model.model) or "text", "enabled": False, "reason": REASON}


class CacheApi:
    """The handlers of the two cache endpoints (module docstring)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def _models(self, request: web.Request) -> list[Lifecycle]:
        name = request.query.get("model")
        return self.fleet.models if name is None else [self.fleet.route(name)]

    async def stats(self, request: web.Request) -> web.Response:
        """Answer each model's cache figures: none is enabled."""
        return json_response({"object": "list", "data": [_entry(m) for m in self._models(request)]})

    async def reset(self, request: web.Request) -> web.Response:
        """Reset each model's cache: there is none, so nothing is reset, and the answer says so."""
        return json_response({"reset": False, "data": [_entry(m) for m in self._models(request)]})
