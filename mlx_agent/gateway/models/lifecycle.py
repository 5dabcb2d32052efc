"""One model's lifecycle behind the front: one shared cold load, open-request accounting, unload, idle unload.

``model_state`` is ``unloaded`` (no worker), ``loading`` (one load in progress, shared by every request that
needs it), ``loaded`` (a ready worker) or ``failed`` (the last load failed or the worker died; the next
request loads again). A worker is detached from the state synchronously before it is stopped, so a request
never reaches a worker that is going away. Admission (memory, how many models may be loaded) is the fleet's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlx_agent.api_errors import Code, known
from mlx_agent.errors import (
    AdapterChanged,
    MlxAgentError,
    ModelChanged,
    RequestRefused,
    RuntimeChanged,
    UnloadBlocked,
)
from mlx_agent.files import changed_files, changed_links, log_tail, utc_iso
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.models.queue import RequestQueue
from mlx_agent.gateway.models.request_memory import read_kv_shape
from mlx_agent.gateway.models.stall import StallWatch
from mlx_agent.gateway.models.worker import WorkerProcess, rank_exits
from mlx_agent.identity import source_changes
from mlx_agent.kept_cache import cache_dir
from mlx_agent.load_memory import memory_estimate
from mlx_agent.policy import Policy
from mlx_agent.wire import EXIT_GENERATION_DIED, MAX_QUEUE, STALL_TIMEOUT_S

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractAsyncContextManager

    from mlx_agent.records.front import FrontModelConfig, ModelState

log = logging.getLogger("mlx_agent.gateway")


class Lifecycle:
    """Owns one model's worker and everything the control endpoints report about it."""

    def __init__(
        self,
        index: int,
        model: FrontModelConfig,
        policy: Policy,
        admission: Callable[[Lifecycle], AbstractAsyncContextManager[None]],
        socket_path: Callable[[int, int], Path],
        loaded: Callable[[Lifecycle, float], None] | None = None,
        *,
        max_queue: int = MAX_QUEUE,
        stall_timeout: float = STALL_TIMEOUT_S,
    ) -> None:
        self.index = index
        self.model = model
        self.name = model["served_model_name"]
        self.policy = policy
        # The fleet's one cold load at a time, entered once it has made room; raises RequestRefused to refuse.
        self._admission = admission
        self._socket_path = socket_path
        self._loaded = loaded  # told how long each successful load took
        self.state = "unloaded"
        self.worker: WorkerProcess | None = None
        self.loads = 0
        self.evictions = 0
        self.worker_exits = 0  # workers that exited on their own (crashed, or their generation thread died)
        self.open_requests = 0
        self.open_streams = 0
        self.last_error: dict[str, Any] | None = None
        self.memory_check: dict[str, Any] | None = None
        self.load_blocked_reason: str | None = None
        self.last_used: float | None = None
        self.idle_since: float | None = None
        self._idle_mono: float | None = None
        self._idle_handle: asyncio.TimerHandle | None = None
        self._load_task: asyncio.Task[WorkerProcess] | None = None
        self._stopping: set[asyncio.Task[str]] = set()
        self.queue = RequestQueue(self.name, model.get("worker_slots"), max_queue)
        self.stall = StallWatch(stall_timeout)
        self.wedged_pid: int | None = None  # the worker last found wedged, until a new one is ready
        self.kv_shape = read_kv_shape(Path(model["source"]["path"]))  # the per-request memory check's
        self.memory_refusals = 0

    @property
    def ready_at(self) -> float | None:
        """Return when the current worker became ready (None without one)."""
        return self.worker.ready_at if self.worker is not None else None

    @property
    def busy(self) -> bool:
        """Say whether a request, a stream or a load is open (such a model is never evicted or unloaded)."""
        return bool(self.open_requests or self.open_streams or self.state == "loading")

    # -- requests ---------------------------------------------------------------------------------------------

    def request_started(self, stream: bool) -> None:
        """Count an open model request; a busy model is not idle."""
        if stream:
            self.open_streams += 1
        else:
            self.open_requests += 1
        self.last_used = time.time()
        self._cancel_idle()
        self.idle_since = self._idle_mono = None

    def request_finished(self, stream: bool) -> None:
        """Uncount a model request; when none is left open, idle time starts."""
        if stream:
            self.open_streams -= 1
        else:
            self.open_requests -= 1
        self.last_used = time.time()
        if self.open_requests == 0 and self.open_streams == 0:
            self._became_idle()

    async def acquire(self) -> WorkerProcess:
        """Return the ready worker, loading it first if needed; concurrent callers share one load."""
        self.check_worker()
        if self.state == "loaded" and self.worker is not None:
            return self.worker
        if self._load_task is None:
            task = asyncio.get_running_loop().create_task(self._load())
            task.add_done_callback(_consume)
            self._load_task = task
        return await asyncio.shield(self._load_task)

    @contextlib.asynccontextmanager
    async def admitted(self, alone: bool, stream: bool) -> AsyncIterator[WorkerProcess]:
        """Wait in the queue for a ready worker and one of its slots (``queue``), then hold both while it runs."""
        self.queue.join()
        waiting = True
        try:
            await self.acquire()
            async with self.queue.slot(alone):
                worker = await self.acquire()  # the worker it waited for may have gone meanwhile
                self.queue.leave()
                waiting = False
                self.stall.begin(stream)
                try:
                    yield worker
                finally:
                    self.stall.end(stream)
        finally:
            if waiting:
                self.queue.leave()

    def worker_failure(self, worker: WorkerProcess, message: str) -> RequestRefused:
        """Return the refusal of a request its worker failed: ``worker_wedged`` when the front ended it so."""
        if worker.pid == self.wedged_pid:
            return refused(Code.WORKER_WEDGED, self.stall.message or message)
        return refused(Code.WORKER_FAILED, message)

    # -- loading ----------------------------------------------------------------------------------------------

    async def _load(self) -> WorkerProcess:
        previous = self.state
        self.state = "loading"
        try:
            if self._stopping:  # a worker still shutting down holds memory the check must not count as used
                await asyncio.gather(*self._stopping, return_exceptions=True)
            async with self._admission(self):
                return await self._start_worker()
        except RequestRefused as refusal:
            if refusal.code in (Code.INSUFFICIENT_HEADROOM, Code.MEMORY_UNKNOWN, Code.TOO_MANY_LOADED):
                self.state = previous
            raise
        except BaseException:
            if self.state == "loading":
                self.state = previous
            raise
        finally:
            self._load_task = None

    async def _start_worker(self) -> WorkerProcess:
        """Spawn a worker and wait until it is ready, with the file checks before and after."""
        await self._check_files("before")
        self.loads += 1
        started = time.monotonic()
        log.info("%s: loading worker (load %d)", self.name, self.loads)
        spec = self.model["worker"]
        try:
            worker = WorkerProcess.spawn(
                spec, self.loads, self._socket_path(self.index, self.loads), cache_dir(self.model)
            )
        except OSError as exc:
            raise self._fail(
                MlxAgentError(f"the worker could not be started: {exc}", details={"argv": spec["argv"]}),
                "launch_failed",
            ) from exc
        self.worker = worker
        try:
            await worker.wait_ready()
        except MlxAgentError as exc:
            self.worker = None
            await worker.stop()
            raise self._fail(exc, exc.code) from exc
        except BaseException:
            self.worker = None
            worker.kill_now()
            await worker.session.close()
            raise
        try:
            await self._check_files("after")
        except RequestRefused:
            self.worker = None
            await worker.stop()
            raise
        self.state = "loaded"
        self.last_error = None
        self.wedged_pid = None
        self.stall.touch()  # requests still ending on a wedged worker must not make this one look quiet
        log.info("%s: worker %d ready on %s", self.name, worker.pid, worker.address)
        if self._loaded is not None:
            self._loaded(self, time.monotonic() - started)
        if self.open_requests == 0 and self.open_streams == 0:
            self._became_idle()
        return worker

    async def _check_files(self, when: str) -> None:
        if when == "before":  # the base (and draft) model's bound identity, before a worker may load it
            sources = [("model", self.model["source"]), ("draft model", self.model["draft_source"])]
            for which, source in sources:
                if source is None:
                    continue
                moved = await asyncio.to_thread(source_changes, source)
                if moved:
                    error: MlxAgentError = ModelChanged(
                        f"the {which}'s files changed since the plan was reviewed ({len(moved)} file(s)); "
                        "restore them, or preview and confirm a new serve plan",
                        details={"changed": moved, "path": source["path"], "draft": which != "model"},
                    )
                    raise self._fail(error, error.code)
            runtime = self.model["runtime_checks"]
            changed_runtime = changed_links(runtime) + await asyncio.to_thread(
                changed_files, [(Path(c["path"]), c["sha256"], c["size"]) for c in runtime]
            )
            if changed_runtime:
                error = RuntimeChanged(
                    "the interpreter, mlx-agent's entry, the runtime's sources or its executable changed since the "
                    "plan was reviewed (details.changed names them); preview and confirm a new serve plan",
                    details={"changed": changed_runtime},
                )
                raise self._fail(error, error.code)
        checks = self.model["file_checks"]
        if not checks:
            return
        changed = await asyncio.to_thread(changed_files, [(Path(c["path"]), c["sha256"], c["size"]) for c in checks])
        if changed:
            error = AdapterChanged(
                f"adapter or training files changed since the plan was reviewed (checked {when} "
                "load); preview and confirm a new serve plan",
                details={"changed": changed, "checked": when},
            )
            raise self._fail(error, error.code)

    def _fail(self, error: MlxAgentError, code: str) -> RequestRefused:
        self.state = "failed"
        self.last_error = {"code": code, "message": error.message, "at": utc_iso(time.time()), "details": error.details}
        log.error("%s: load failed: %s: %s", self.name, code, error.message)
        # The changes a new plan fixes keep their own code; every other failure is load_failed.
        client_code = known(code) if code in (AdapterChanged.code, ModelChanged.code, RuntimeChanged.code) else None
        return refused(client_code or Code.LOAD_FAILED, f"the model could not be loaded: {error.message}")

    # -- liveness ---------------------------------------------------------------------------------------------

    def check_worker(self) -> None:
        """Notice a loaded worker that has exited: the state becomes ``failed`` and the next request loads again."""
        worker = self.worker
        if worker is None or self.state != "loaded" or worker.stopping:
            return
        code = worker.exited()
        if code is None:
            return
        why = "its generation thread died" if code == EXIT_GENERATION_DIED else f"status {code}"
        log.error("%s: worker %d exited (%s)", self.name, worker.pid, why)
        self._detach(worker)
        self.state = "failed"
        self.worker_exits += 1
        self.last_error = {
            "code": "generation_died" if code == EXIT_GENERATION_DIED else "worker_exited",
            "message": f"the worker exited: {why}",
            "at": utc_iso(time.time()),
            "details": {
                "exit_code": code,
                "log_path": str(worker.log_path),
                "log_tail": (tail := log_tail(worker.log_path)),
                "ranks": rank_exits(tail),
            },
        }
        if self.model["policy"]["preload"] and self._load_task is None:
            # A model the front keeps loaded is started again now, not at the next request.
            log.info("%s: starting a new worker", self.name)
            task = asyncio.get_running_loop().create_task(self.acquire())
            task.add_done_callback(_consume)

    def check_stall(self) -> None:
        """Notice a worker that sent its running requests nothing for ``stall_timeout``: end them and replace it."""
        worker = self.worker
        if worker is None or self.state != "loaded" or worker.stopping:
            return
        quiet = self.stall.stalled(worker.pid)
        if quiet is None:
            return
        message = (
            f"the model worker sent nothing for {quiet:.0f} s to {self.stall.running} running request(s) "
            f"(--stall-timeout {self.stall.timeout:g}): it is wedged, and the front replaced it"
        )
        log.error("%s: worker %d wedged: %s", self.name, worker.pid, message)
        self.stall.wedged += 1
        self.wedged_pid = worker.pid
        self.stall.message = message
        self.stall.abort(message)
        self._detach(worker, grace=0.0)  # a wedged worker saves nothing: KILL at once, so its memory comes back
        self.state = "wedged"
        self.last_error = {
            "code": Code.WORKER_WEDGED.value,
            "message": message,
            "at": utc_iso(time.time()),
            "details": {
                "worker_pid": worker.pid,
                "quiet_s": round(quiet, 1),
                "stall_timeout": self.stall.timeout,
                "running": self.stall.running,
                "log_path": str(worker.log_path),
                "log_tail": log_tail(worker.log_path),
            },
        }
        if self.model["policy"]["preload"] and self._load_task is None:
            log.info("%s: starting a new worker", self.name)
            task = asyncio.get_running_loop().create_task(self.acquire())
            task.add_done_callback(_consume)

    # -- unloading --------------------------------------------------------------------------------------------

    def _detach(self, worker: WorkerProcess, grace: float | None = None) -> asyncio.Task[str]:
        """Take the worker out of service now and stop it in the background; return the stopping task."""
        self.worker = None
        self.state = "unloaded"
        self._cancel_idle()
        self.idle_since = self._idle_mono = None
        task = asyncio.get_running_loop().create_task(worker.stop(grace))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        return task

    def blocked(self) -> UnloadBlocked | None:
        """Return why this model cannot be unloaded now (open requests, streams or a load), or None."""
        self.check_worker()
        if not self.busy:
            return None
        return UnloadBlocked(
            f"{self.name} has open requests or streams",
            details={
                "open_requests": self.open_requests,
                "open_streams": self.open_streams,
                "loading": self.state == "loading",
            },
        )

    async def unload(self, why: str = "on request") -> dict[str, Any]:
        """Stop the worker and keep the front up; raise ``UnloadBlocked`` while requests or a load are open."""
        refusal = self.blocked()
        if refusal is not None:
            raise refusal
        worker = self.worker
        if worker is None:
            self.state = "unloaded"
            return {"name": self.name, "unloaded": True, "worker_pid": None, "model_state": self.state}
        how = await asyncio.shield(self._detach(worker))
        log.info("%s: worker %d unloaded %s (%s)", self.name, worker.pid, why, how)
        return {
            "name": self.name,
            "unloaded": True,
            "worker_pid": worker.pid,
            "stopped": how,
            "model_state": self.state,
        }

    async def evict(self) -> None:
        """Unload this idle model to make room for another, and wait until its worker has gone."""
        worker = self.worker
        if worker is None:
            return
        self.evictions += 1
        how = await asyncio.shield(self._detach(worker))
        log.info("%s: worker %d evicted (%s)", self.name, worker.pid, how)

    def _became_idle(self) -> None:
        if self.state != "loaded":
            return
        self.idle_since = time.time()
        self._idle_mono = time.monotonic()
        self._schedule_idle()

    def _cancel_idle(self) -> None:
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None

    def _schedule_idle(self) -> None:
        self._cancel_idle()
        if self.state != "loaded" or self._idle_mono is None or not self.policy.idle_unload:
            return
        delay = max(0.0, self._idle_mono + self.policy.idle_timeout - time.monotonic())
        self._idle_handle = asyncio.get_running_loop().call_later(delay, self._idle_expired)

    def _idle_expired(self) -> None:
        self._idle_handle = None
        worker = self.worker
        if worker is None or self.state != "loaded" or self.busy or not self.policy.idle_unload:
            return
        log.info("%s: worker %d idle for %g s: unloading", self.name, worker.pid, self.policy.idle_timeout)
        self._detach(worker)

    def replace_policy(self, policy: Policy) -> None:
        """Apply a new idle policy (the idle timer is rescheduled from when idle time started)."""
        self.policy = policy
        self._schedule_idle()

    # -- status and shutdown ----------------------------------------------------------------------------------

    def status(self, min_headroom_gb: float | None) -> ModelState:
        """Return this model's part of the front's state document."""
        self.check_worker()
        worker = self.worker
        unload_at = None
        if self._idle_handle is not None and self.idle_since is not None:
            unload_at = utc_iso(self.idle_since + self.policy.idle_timeout)
        state: Any = self.state
        return {
            "name": self.name,
            "aliases": self.model["alias"],
            "model_state": state,
            "worker": None
            if worker is None
            else {
                "pid": worker.pid,
                "transport": worker.spec["transport"],
                "address": worker.address,
                "started_at": utc_iso(worker.started_at),
                "ready_at": utc_iso(worker.ready_at),
                "log_path": str(worker.log_path),
            },
            "policy": {
                "idle_timeout": self.policy.idle_timeout,
                "keep_loaded": self.policy.keep_loaded,
                "min_headroom_gb": min_headroom_gb,
            },
            "memory_check": self.memory_check,
            "load_blocked_reason": self.load_blocked_reason,
            "open_requests": self.open_requests,
            "open_streams": self.open_streams,
            "last_error": self.last_error,
            "loads": self.loads,
            "evictions": self.evictions,
            "worker_exits": self.worker_exits,
            "weight_bytes": self.model["weight_bytes"],
            "memory_estimate_bytes": memory_estimate(self.model["weight_bytes"]),
            "last_used": utc_iso(self.last_used),
            "idle_since": utc_iso(self.idle_since),
            "idle_unload_at": unload_at,
            "queue": self.queue.state(self.memory_refusals),
            "stall": self.stall.state(),
        }

    async def close(self) -> None:
        """Stop everything: a load in progress, the worker."""
        self._cancel_idle()
        if self._load_task is not None:
            self._load_task.cancel()
            with contextlib.suppress(BaseException):
                await self._load_task
        if self.worker is not None:
            self._detach(self.worker)
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)


def _consume(task: asyncio.Task[WorkerProcess]) -> None:
    # Every waiter may have gone (clients disconnected); the outcome is in the state, not lost in a warning.
    if not task.cancelled():
        task.exception()
