"""Control endpoints under ``/mlx-agent/`` (control token required, see security.py).

* ``GET  /mlx-agent/status`` -> the front's state (``records.FrontState``, ``schemas/front_state.json``).
* ``POST /mlx-agent/unload`` with ``{"model": NAME}`` (or ``{}`` for every model) -> 200
  ``{"unloaded": true, "models": [...], ...}``, or 409 ``{"error": {"code": "unload_blocked", "open_requests",
  "open_streams", "loading", "model"}}`` while the model (any of them) has open work.
* ``PUT  /mlx-agent/policy`` with the whole policy ``{"idle_timeout", "keep_loaded", "min_headroom_gb"}`` and
  optionally ``"model"`` -> 200 ``{"policy", "policy_path"}`` once it is persisted and applied; 400
  ``policy_rejected`` for a bad object, 500 ``policy_not_saved`` if it cannot be written (nothing changes then).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from aiohttp import web

from mlx_agent.api_errors import Code
from mlx_agent.errors import PolicyRejected, RequestRefused, StateWriteFailed, UnloadBlocked
from mlx_agent.files import write_json_atomic
from mlx_agent.gateway.door.http_errors import error_response, json_response, refusal_response
from mlx_agent.gateway.model_kinds import kind_of, paths_of
from mlx_agent.gateway.models.admission import policy_file
from mlx_agent.gateway.models.fleet import Fleet
from mlx_agent.gateway.openai.cache_stats import model_caches
from mlx_agent.policy import Policy, parse_policy


async def _body(request: web.Request) -> dict[str, object]:
    raw = await request.read()
    try:
        doc = json.loads(raw) if raw.strip() else {}
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise PolicyRejected("the body must be a JSON object", details={"field": "body"})
    return doc


class Control:
    """The control handlers, over the front's fleet of models."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._policy_lock = asyncio.Lock()

    async def status(self, request: web.Request) -> web.Response:
        """Return the front's state: each model's kind and endpoints, and an mlx-vlm chat model's caches."""
        state = self.fleet.status()
        for doc, model in zip(state["models"], self.fleet.models, strict=True):
            doc["kind"] = kind_of(model.model) or "text"
            doc["endpoints"] = list(paths_of(model.model))
            caches = await model_caches(model)
            if caches is not None:
                doc["caches"] = caches
        return json_response(state)

    async def unload(self, request: web.Request) -> web.Response:
        """Stop the worker(s) and keep the front up, unless requests or streams are open."""
        try:
            doc = await _body(request)
            name = doc.get("model")
            if name is not None and not isinstance(name, str):
                return error_response(Code.INVALID_TYPE, "model must be a served model's name", param="model")
            result = await self.fleet.unload(name)
        except RequestRefused as refusal:
            return refusal_response(refusal)
        except PolicyRejected as exc:
            return error_response(Code.INVALID_BODY, exc.message, param="body")
        except UnloadBlocked as blocked:
            d = blocked.details
            what = (
                "a load is in progress"
                if d["loading"] and not (d["open_requests"] or d["open_streams"])
                else f"{d['open_requests']} open request(s) and {d['open_streams']} open stream(s)"
            )
            return error_response(
                Code.UNLOAD_BLOCKED, f"cannot unload {d['model']} while {what}; retry when they finish", **d
            )
        return json_response(result)

    async def policy(self, request: web.Request) -> web.Response:
        """Replace the whole policy, persisted atomically, and apply it without a restart."""
        try:
            doc = await _body(request)
            name = doc.pop("model", None)
            if name is not None and not isinstance(name, str):
                raise PolicyRejected("model must be a served model's name", details={"field": "model"})
            policy = parse_policy(doc)
            if name is not None:
                self.fleet.route(name)  # an unknown name is refused before anything changes
        except PolicyRejected as exc:
            return error_response(Code.POLICY_REJECTED, exc.message, param=str(exc.details.get("field", "policy")))
        except RequestRefused as refusal:
            return refusal_response(refusal)
        path = Path(self.fleet.config["policy_path"])
        async with self._policy_lock:
            # Saved first, then applied: a policy that could not be saved changes nothing.
            targets = {m.name for m in self.fleet.models} if name is None else {self.fleet.route(name).name}
            idle = Policy(policy.idle_timeout, policy.keep_loaded)
            policies = {n: idle if n in targets else p for n, p in self.fleet.policies().items()}
            try:
                await asyncio.to_thread(write_json_atomic, path, policy_file(policy.min_headroom_gb, policies))
            except (OSError, StateWriteFailed) as exc:
                return error_response(Code.POLICY_NOT_SAVED, f"the policy could not be saved: {exc}")
            self.fleet.replace_policy(policy, name)
        return json_response({"policy": policy.to_json(), "model": name, "policy_path": str(path)})
