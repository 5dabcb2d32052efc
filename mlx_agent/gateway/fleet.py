"""The models behind one front: routing by the request's ``model``, admission before a cold load, control.

A request names its model by a served name or alias (a glob such as ``claude-*``), first match in the plan's
order; a request without ``model`` gets the first model. Before a cold load the fleet checks memory afresh
(``admission.memory_check``) against the reserve. An eager front loads every ``preload`` model at start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlx_agent.errors import MlxAgentError, RequestRefused, UnloadBlocked
from mlx_agent.files import utc_iso
from mlx_agent.gateway.admission import RETRY_AFTER_S, available_memory, memory_check
from mlx_agent.gateway.config import matches
from mlx_agent.gateway.lifecycle import Lifecycle
from mlx_agent.policy import Policy
from mlx_agent.wire import FRONT_STATE_VERSION

if TYPE_CHECKING:
    from mlx_agent.records import FrontConfig, FrontState

WATCH_INTERVAL_S = 0.5
log = logging.getLogger("mlx_agent.gateway")


class Fleet:
    """Every model of one front, and what applies to all of them."""

    def __init__(
        self, config: FrontConfig, policies: dict[str, Policy] | None = None, min_headroom_gb: float | None = None
    ) -> None:
        self.config = config
        self.min_headroom_gb = config["min_headroom_gb"] if policies is None else min_headroom_gb
        self.started_at = time.time()
        self.socket_dir = self._socket_dir()
        self.models: list[Lifecycle] = []
        for index, model in enumerate(config["models"]):
            policy = (policies or {}).get(model["name"]) or Policy(
                model["policy"]["idle_timeout"], model["policy"]["keep_loaded"]
            )
            self.models.append(Lifecycle(index, model, policy, self.admit, self.socket_path))
        self._watch_task: asyncio.Task[None] | None = None

    # -- addresses ----------------------------------------------------------------------------------------

    def _socket_dir(self) -> Path:
        """Create the private directory of the workers' sockets (0700 whatever the umask)."""
        raw = self.config["socket_dir"]
        if not raw:
            return Path(tempfile.mkdtemp(prefix="mlx-agent-"))
        path = Path(raw)
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        return path

    def socket_path(self, index: int, load: int) -> Path:
        """Return the socket of a model's ``load``-th worker."""
        return self.socket_dir / f"{index}-{load}.sock"

    # -- routing ------------------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Return every served name and alias, in the plan's order (what an unknown-model error lists)."""
        return [n for m in self.models for n in (m.name, *m.model["aliases"])]

    def route(self, name: object) -> Lifecycle:
        """Return the model a request names (the first one when it names none); 404 for an unknown name."""
        if name is None or name == "":
            return self.models[0]
        if not isinstance(name, str):
            raise RequestRefused(400, "'model' must be a string", code="invalid_type", param="model")
        for model in self.models:
            if name == model.name or name in model.model["hidden_names"]:
                return model
        for model in self.models:
            if matches(name, model.model["aliases"]):
                return model
        raise RequestRefused(
            404,
            f"The model '{name}' is not served here; use one of: {', '.join(self.names)}",
            code="model_not_found",
            type_="not_found_error",
            param="model",
        )

    # -- admission ----------------------------------------------------------------------------------------

    async def admit(self, model: Lifecycle) -> None:
        """Refuse a cold load that the memory reserve rules out (503, with the dated estimate)."""
        reserve = self.min_headroom_gb
        check = memory_check(model.model["weight_bytes"], reserve or 0, await asyncio.to_thread(available_memory))
        check["enforced"] = reserve is not None
        model.memory_check = check
        if reserve is None or check["ok"]:
            model.load_blocked_reason = None
            return
        reason = check["reason"]
        model.load_blocked_reason = reason
        if reason == "memory_unknown":
            message = "cannot tell whether the model fits: the weight size or the available memory is unknown"
        else:
            message = (
                f"not enough free memory to load {model.name}: {check['available_bytes'] / 1e9:.2f} GB "
                f"available, {check['required_bytes'] / 1e9:.2f} GB required (weights x 1.10 + 1.5 GB "
                f"runtime + {reserve:g} GB reserve)"
            )
        raise RequestRefused(
            503,
            message,
            code=reason,
            type_="server_error",
            headers={"Retry-After": str(RETRY_AFTER_S)},
            extra={"memory_check": check},
        )

    # -- start, watch, control ----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Say whether every model the front preloads is loaded."""
        return all(m.state == "loaded" for m in self.models if m.model["policy"]["preload"])

    async def preload(self) -> MlxAgentError | None:
        """Load every ``preload`` model, in order; return the first failure (the front then exits with it)."""
        for model in self.models:
            if not model.model["policy"]["preload"]:
                continue
            try:
                await model.acquire()
            except RequestRefused as refusal:
                error = model.last_error or {}
                from mlx_agent.errors import error_class

                cls = error_class(str(error.get("code"))) if error else None
                if cls is not None and "message" in error:
                    return cls(str(error["message"]), details=dict(error.get("details") or {}))
                return refusal
        return None

    def start_watching(self) -> None:
        """Start the background check that notices a worker dying while nothing talks to it."""

        async def watch() -> None:
            while True:
                await asyncio.sleep(WATCH_INTERVAL_S)
                for model in self.models:
                    model.check_worker()

        self._watch_task = asyncio.get_running_loop().create_task(watch())

    def status(self) -> FrontState:
        """Return the front's state document."""
        return {
            "format_version": FRONT_STATE_VERSION,
            "pid": os.getpid(),
            "port": self.config["port"],
            "mode": self.config["mode"],
            "started_at": utc_iso(self.started_at),
            "ready": self.ready,
            "models": [m.status(self.min_headroom_gb) for m in self.models],
        }

    async def unload(self, name: str | None) -> dict[str, Any]:
        """Unload one model (by name) or every model; refused, unloading nothing, while any of them is busy."""
        targets = self.models if name is None else [self.route(name)]
        for model in targets:
            refusal = model.blocked()
            if refusal is not None:
                raise UnloadBlocked(refusal.message, details={**refusal.details, "model": model.name})
        results = [await model.unload() for model in targets]
        return {
            "unloaded": True,
            "models": results,
            "worker_pid": results[0]["worker_pid"],
            "model_state": results[0]["model_state"],
        }

    def replace_policy(self, policy: Policy, name: str | None) -> None:
        """Apply a policy: its idle part to one model or all, its reserve to the whole front."""
        for model in self.models if name is None else [self.route(name)]:
            model.replace_policy(Policy(policy.idle_timeout, policy.keep_loaded))
        self.min_headroom_gb = policy.min_headroom_gb
        if policy.min_headroom_gb is None:
            for model in self.models:
                model.load_blocked_reason = None

    def policies(self) -> dict[str, Policy]:
        """Return each model's idle policy."""
        return {m.name: m.policy for m in self.models}

    async def close(self) -> None:
        """Stop the watcher and every model's worker."""
        if self._watch_task is not None:
            self._watch_task.cancel()
        await asyncio.gather(*(m.close() for m in self.models), return_exceptions=True)
        if not self.config["socket_dir"]:
            import shutil

            shutil.rmtree(self.socket_dir, ignore_errors=True)
