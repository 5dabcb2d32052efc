"""The models behind one front: routing by the request's ``model``, admission before a cold load, control.

A request names its model by a served name or alias (a glob such as ``claude-*``), first match in the plan's
order; a request without ``model`` gets the first model. An eager front loads every ``preload`` model at start.

Cold loads are admitted one at a time (``admission``), so two loads never judge the same free memory. Before
one, the fleet makes room: while ``max_loaded`` models are loaded, or the fresh memory check
(``load_memory.memory_check``) fails against the reserve, it unloads the least recently used loaded model that
has no open request, stream or load (``keep_loaded`` models only when no other can go) and checks again. When
nothing can go, the load is refused with 503, naming what holds the memory. A busy model is never evicted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlx_agent.api_errors import Code
from mlx_agent.errors import MlxAgentError, RequestRefused, UnloadBlocked
from mlx_agent.files import closed_dir, utc_iso
from mlx_agent.gateway.door.config import matches
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.models.admission import RETRY_AFTER_S
from mlx_agent.gateway.models.lifecycle import Lifecycle
from mlx_agent.gateway.models.progress import machine_memory
from mlx_agent.gateway.models.temp_sockets import TempSocketDir
from mlx_agent.gateway.observe.metrics import FrontMetrics
from mlx_agent.load_memory import available_memory, memory_check
from mlx_agent.policy import Policy
from mlx_agent.wire import FRONT_STATE_VERSION, MAX_QUEUE, STALL_TIMEOUT_S

if TYPE_CHECKING:
    from mlx_agent.records.front import FrontConfig, FrontState

WATCH_INTERVAL_S = 0.5
log = logging.getLogger("mlx_agent.gateway")


class Fleet:
    """Every model of one front, and what applies to all of them."""

    def __init__(
        self, config: FrontConfig, policies: dict[str, Policy] | None = None, min_headroom_gb: float | None = None
    ) -> None:
        self.config = config
        self.min_headroom_gb = config["min_headroom_gb"] if policies is None else min_headroom_gb
        self.max_loaded = config["max_loaded"]
        self.started_at = time.time()
        raw = config["socket_dir"]
        # No directory planned: a private temporary one, removed at close.
        self._temp_sockets = None if raw else TempSocketDir()
        # A planned one is made 0700 whatever the umask; a link planted there is refused, never followed.
        self.socket_dir = self._temp_sockets.path if self._temp_sockets else closed_dir(Path(raw))
        self.models: list[Lifecycle] = []  # filled below; the metrics read it at scrape time
        self.metrics = FrontMetrics(self.models)
        for index, model in enumerate(config["models"]):
            policy = (policies or {}).get(model["served_model_name"]) or Policy(
                model["policy"]["idle_timeout"], model["policy"]["keep_loaded"]
            )
            self.models.append(
                Lifecycle(
                    index,
                    model,
                    policy,
                    self.admission,
                    self.socket_path,
                    self.loaded,
                    max_queue=config.get("max_queue", MAX_QUEUE),
                    stall_timeout=config.get("stall_timeout", STALL_TIMEOUT_S),
                )
            )
        self._watch_task: asyncio.Task[None] | None = None
        self._load_lock = asyncio.Lock()

    # -- addresses ----------------------------------------------------------------------------------------

    def socket_path(self, index: int, load: int) -> Path:
        """Return the socket of a model's ``load``-th worker."""
        return self.socket_dir / f"{index}-{load}.sock"

    # -- routing ------------------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Return every served name and alias, in the plan's order (what an unknown-model error lists)."""
        return [n for m in self.models for n in (m.name, *m.model["alias"])]

    def route(self, name: object) -> Lifecycle:
        """Return the model a request names (the first one when it names none); 404 for an unknown name."""
        if name is None or name == "":
            return self.models[0]
        if not isinstance(name, str):
            raise refused(Code.INVALID_TYPE, "'model' must be a string", param="model")
        for model in self.models:
            if name == model.name or name in model.model["hidden_names"]:
                return model
        for model in self.models:
            if matches(name, model.model["alias"]):
                return model
        raise refused(
            Code.MODEL_NOT_FOUND,
            f"The model '{name}' is not served here; use one of: {', '.join(self.names)}",
            param="model",
        )

    # -- admission ----------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def admission(self, model: Lifecycle) -> AsyncIterator[None]:
        """Hold the fleet's one cold load for ``model``, after making room for it (module docstring)."""
        async with self._load_lock:
            try:
                await self._make_room(model)
            except RequestRefused as refusal:
                self.metrics.refusals.labels(model.name, refusal.code).inc()
                raise
            yield

    def loaded(self, model: Lifecycle, seconds: float) -> None:
        """Record a finished load's time."""
        self.metrics.load_seconds.labels(model.name).observe(seconds)

    def _holders(self, model: Lifecycle) -> list[Lifecycle]:
        return [m for m in self.models if m is not model and m.worker is not None]

    def _victim(self, model: Lifecycle) -> Lifecycle | None:
        """Return the loaded model to unload first: idle, least recently used, ``keep_loaded`` ones last."""
        idle = [m for m in self._holders(model) if m.state == "loaded" and not m.busy]
        idle.sort(key=lambda m: (m.policy.keep_loaded, m.last_used or m.ready_at or 0.0))
        return idle[0] if idle else None

    async def _evict(self, model: Lifecycle, why: str) -> bool:
        """Unload the best victim to make room for ``model``; return False when none can go."""
        victim = self._victim(model)
        if victim is None:
            return False
        log.info("%s: evicting %s (least recently used, idle) to load %s: %s", model.name, victim.name, model.name, why)
        await victim.evict()
        return True

    def _held_by(self, model: Lifecycle) -> list[dict[str, Any]]:
        return [
            {
                "name": m.name,
                "model_state": m.state,
                "open_requests": m.open_requests,
                "open_streams": m.open_streams,
                "keep_loaded": m.policy.keep_loaded,
                "weight_bytes": m.model["weight_bytes"],
            }
            for m in self._holders(model)
        ]

    def _refuse(self, model: Lifecycle, code: Code, message: str, check: dict[str, Any] | None) -> RequestRefused:
        held = self._held_by(model)
        if held:
            busy = ", ".join(
                f"{h['name']} ({h['open_requests']} open request(s), {h['open_streams']} open stream(s))" for h in held
            )
            message += f"; loaded and busy: {busy}"
        extra: dict[str, Any] = {"held_by": held}
        if check is not None:
            extra["memory_check"] = check
        return refused(code, message, headers={"Retry-After": str(RETRY_AFTER_S)}, extra=extra)

    async def _make_room(self, model: Lifecycle) -> None:
        """Evict until ``model`` may load, or refuse (503) when nothing idle is left to evict."""
        while self.max_loaded is not None and len(self._holders(model)) >= self.max_loaded:
            if not await self._evict(model, f"--max-loaded {self.max_loaded} reached"):
                model.load_blocked_reason = Code.TOO_MANY_LOADED
                raise self._refuse(
                    model,
                    Code.TOO_MANY_LOADED,
                    f"cannot load {model.name}: {self.max_loaded} model(s) may be loaded at once and none is idle",
                    None,
                )
        while True:
            reserve = self.min_headroom_gb
            available = await asyncio.to_thread(available_memory)
            check = memory_check(model.model["weight_bytes"], reserve or 0, available)
            check["enforced"] = reserve is not None
            model.memory_check = check
            if reserve is None or check["ok"]:
                model.load_blocked_reason = None
                return
            reason = check["reason"]
            if reason is Code.INSUFFICIENT_HEADROOM and await self._evict(model, "not enough free memory"):
                continue
            model.load_blocked_reason = reason
            if reason is Code.MEMORY_UNKNOWN:
                message = "cannot tell whether the model fits: the weight size or the available memory is unknown"
            else:
                message = (
                    f"not enough free memory to load {model.name}: {check['available_bytes'] / 1e9:.2f} GB "
                    f"available, {check['required_bytes'] / 1e9:.2f} GB required (weights x 1.10 + 1.5 GB "
                    f"runtime + {reserve:g} GB reserve)"
                )
            raise self._refuse(model, reason, message, check)

    # -- start, watch, control ----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Say whether every model the front preloads is loaded."""
        return all(m.state == "loaded" for m in self.models if m.model["policy"]["preload"])

    async def preload(self) -> MlxAgentError | None:
        """Load every ``preload`` model, in order; return the first failure (the front then exits with it)."""
        from mlx_agent.errors import error_class

        for model in self.models:
            if not model.model["policy"]["preload"]:
                continue
            try:
                await model.acquire()
            except RequestRefused as refusal:
                error = model.last_error or {}
                cls = error_class(str(error.get("code"))) if error else None
                if cls is not None and "message" in error:
                    return cls(str(error["message"]), details=dict(error.get("details") or {}))
                cls = error_class(refusal.code)  # admission: insufficient_headroom, memory_unknown, ...
                if cls is not None:
                    return cls(refusal.message, details={"model": model.name, **refusal.extra})
                return refusal
        return None

    def start_watching(self) -> None:
        """Start the background check that notices a worker dying, or wedged, while nothing talks to it."""

        async def watch() -> None:
            while True:
                await asyncio.sleep(WATCH_INTERVAL_S)
                for model in self.models:
                    model.check_worker()
                    doc = self.metrics.progress.poll(model)  # prefill read lands in its second's sample
                    if model.worker is not None:  # prompt tokens read are progress too (``stall``)
                        model.stall.prefilled(model.worker.pid, (doc or {}).get("prefill_tokens"))
                    model.check_stall()

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
            "max_loaded": self.max_loaded,
            "min_headroom_gb": self.min_headroom_gb,
            "machine_memory": machine_memory(),
            "models": [{**m.status(self.min_headroom_gb), **self.metrics.progress.fields(m)} for m in self.models],
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
        if self._temp_sockets is not None:
            self._temp_sockets.close()
