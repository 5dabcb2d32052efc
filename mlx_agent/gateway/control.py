"""Control endpoints under ``/mlx-agent/`` (control token required, see security.py).

* ``GET  /mlx-agent/status`` -> the gateway state (``schemas/gateway_state.json``).
* ``POST /mlx-agent/unload`` -> 200 ``{"unloaded": true, "worker_pid", "model_state"}``, or 409
  ``{"error": {"code": "unload_blocked", "open_requests", "open_streams", "loading", ...}}``.
* ``PUT  /mlx-agent/policy`` with the whole policy object -> 200 ``{"policy", "policy_path"}`` once it is
  persisted and applied; 400 ``invalid_policy`` for a bad object, 500 ``policy_not_saved`` if it cannot be written.
"""

from __future__ import annotations

import json

from aiohttp import web

from mlx_agent.gateway.http_errors import error_response, json_response
from mlx_agent.gateway.lifecycle import Lifecycle, UnloadBlocked
from mlx_agent.gateway.policy import PolicyError, parse_policy


class Control:
    """The control handlers, over one lifecycle."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self.lifecycle = lifecycle

    async def status(self, request: web.Request) -> web.Response:
        """Return the gateway state."""
        return json_response(self.lifecycle.status())

    async def unload(self, request: web.Request) -> web.Response:
        """Stop the worker and keep the gateway up, unless requests or streams are open."""
        try:
            result = await self.lifecycle.unload()
        except UnloadBlocked as blocked:
            what = "a load is in progress" if blocked.loading and not (blocked.open_requests or blocked.open_streams) \
                else f"{blocked.open_requests} open request(s) and {blocked.open_streams} open stream(s)"
            return error_response(409, f"cannot unload while {what}; retry when they finish", code="unload_blocked",
                                  type_="conflict_error", open_requests=blocked.open_requests,
                                  open_streams=blocked.open_streams, loading=blocked.loading)
        return json_response(result)

    async def policy(self, request: web.Request) -> web.Response:
        """Replace the whole policy, persisted atomically, and apply it without a restart."""
        try:
            policy = parse_policy(json.loads(await request.read()))
        except ValueError as exc:  # PolicyError is a ValueError, as is a JSON decoding error
            message = str(exc) if isinstance(exc, PolicyError) else "the body must be a JSON policy object"
            return error_response(400, message, code="invalid_policy", param="policy")
        try:
            await self.lifecycle.replace_policy(policy)
        except OSError as exc:
            return error_response(500, f"the policy could not be saved: {exc}", code="policy_not_saved",
                                  type_="server_error")
        return json_response({"policy": policy.to_json(), "policy_path": str(self.lifecycle.config.policy_path)})
