"""The model's lifecycle behind the gateway: one shared cold load, open-request accounting, unload, idle unload.

``model_state`` is ``unloaded`` (no worker), ``loading`` (one load in progress, shared by every request that
needs it), ``loaded`` (a ready worker) or ``failed`` (the last load failed or the worker died; the next
request loads again). A worker is detached from the state synchronously before it is stopped, so a request
never reaches a worker that is going away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from typing import Any

import aiohttp

from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.config import GatewayConfig
from mlx_agent.gateway.integrity import changed_files
from mlx_agent.gateway.policy import (
    RETRY_AFTER_S,
    Policy,
    available_memory,
    iso_from_timestamp,
    memory_check,
    policy_document,
)
from mlx_agent.gateway.worker import WorkerProcess, WorkerStartError

STATE_VERSION = "1.0"
WATCH_INTERVAL_S = 0.5
log = logging.getLogger("mlx_agent.gateway")


class UnloadBlocked(Exception):
    """Open requests or streams (or a load in progress) keep the worker loaded."""

    def __init__(self, open_requests: int, open_streams: int, loading: bool) -> None:
        super().__init__("open requests or streams block unload")
        self.open_requests = open_requests
        self.open_streams = open_streams
        self.loading = loading


class Lifecycle:
    """Owns the worker and everything the control endpoints report about it."""

    def __init__(self, config: GatewayConfig, policy: Policy, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.policy = policy
        self.session = session
        self.state = "unloaded"
        self.worker: WorkerProcess | None = None
        self.loads = 0
        self.open_requests = 0
        self.open_streams = 0
        self.last_error: dict[str, Any] | None = None
        self.memory_check: dict[str, Any] | None = None
        self.load_blocked_reason: str | None = None
        self.started_at = time.time()
        self.idle_since: float | None = None
        self._idle_mono: float | None = None
        self._idle_handle: asyncio.TimerHandle | None = None
        self._load_task: asyncio.Task[WorkerProcess] | None = None
        self._stopping: set[asyncio.Task[str]] = set()
        self._policy_lock = asyncio.Lock()
        self._watch_task: asyncio.Task[None] | None = None

    # -- requests ---------------------------------------------------------------------------------------------

    def request_started(self, stream: bool) -> None:
        """Count an open model request; a busy gateway is not idle."""
        if stream:
            self.open_streams += 1
        else:
            self.open_requests += 1
        self._cancel_idle()
        self.idle_since = self._idle_mono = None

    def request_finished(self, stream: bool) -> None:
        """Uncount a model request; when none is left open, idle time starts."""
        if stream:
            self.open_streams -= 1
        else:
            self.open_requests -= 1
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

    # -- loading ----------------------------------------------------------------------------------------------

    async def _load(self) -> WorkerProcess:
        previous = self.state
        self.state = "loading"
        try:
            if self._stopping:  # a worker still shutting down holds memory the check must not count as used
                await asyncio.gather(*self._stopping, return_exceptions=True)
            self._admit()
            await self._check_files("before")
            self.loads += 1
            log.info("loading worker (load %d)", self.loads)
            try:
                worker = WorkerProcess.spawn(self.config.worker, self.loads)
            except OSError as exc:
                raise self._fail("launch_failed", f"the worker could not be started: {exc}",
                                 {"argv": list(self.config.worker.argv)}) from exc
            self.worker = worker
            try:
                await worker.wait_ready(self.session)
            except WorkerStartError as exc:
                self.worker = None
                await worker.stop()
                raise self._fail(exc.code, exc.message, exc.details) from exc
            except BaseException:
                self.worker = None
                worker.kill_now()
                raise
            try:
                await self._check_files("after")
            except RequestRefused:
                self.worker = None
                await worker.stop()
                raise
            self.state = "loaded"
            self.last_error = None
            log.info("worker %d ready on port %d", worker.pid, worker.port)
            if self.open_requests == 0 and self.open_streams == 0:
                self._became_idle()
            return worker
        except RequestRefused as refusal:
            if refusal.code in ("insufficient_headroom", "memory_unknown"):
                self.state = previous
            raise
        except BaseException:
            if self.state == "loading":
                self.state = previous
            raise
        finally:
            self._load_task = None

    def _admit(self) -> None:
        reserve = self.policy.min_headroom_gb
        check = memory_check(self.config.weight_bytes, reserve or 0, available_memory())
        check["enforced"] = reserve is not None
        self.memory_check = check
        if reserve is None or check["ok"]:
            self.load_blocked_reason = None
            return
        reason = check["reason"]
        self.load_blocked_reason = reason
        if reason == "memory_unknown":
            message = "cannot tell whether the model fits: the weight size or the available memory is unknown"
        else:
            message = (f"not enough free memory to load the model: {check['available_bytes'] / 1e9:.2f} GB "
                       f"available, {check['required_bytes'] / 1e9:.2f} GB required (weights x 1.10 + 1.5 GB "
                       f"runtime + {reserve:g} GB reserve)")
        raise RequestRefused(503, message, code=reason, type_="server_error",
                             headers={"Retry-After": str(RETRY_AFTER_S)}, extra={"memory_check": check})

    async def _check_files(self, when: str) -> None:
        if not self.config.file_checks:
            return
        changed = await asyncio.to_thread(changed_files, self.config.file_checks)
        if changed:
            raise self._fail("adapter_changed",
                             f"adapter or training files changed since the plan was reviewed (checked {when} load); "
                             "preview and confirm a new serve plan", {"changed": changed, "checked": when})

    def _fail(self, code: str, message: str, details: dict[str, Any]) -> RequestRefused:
        self.state = "failed"
        self.last_error = {"code": code, "message": message, "at": iso_from_timestamp(time.time()),
                           "details": details}
        log.error("load failed: %s: %s", code, message)
        client_code = "adapter_changed" if code == "adapter_changed" else "load_failed"
        return RequestRefused(503, f"the model could not be loaded: {message}", code=client_code,
                              type_="server_error")

    # -- liveness ---------------------------------------------------------------------------------------------

    def check_worker(self) -> None:
        """Notice a loaded worker that has exited: the state becomes ``failed`` and the next request loads again."""
        worker = self.worker
        if worker is None or self.state != "loaded" or worker.stopping:
            return
        code = worker.exited()
        if code is None:
            return
        log.error("worker %d exited with status %s", worker.pid, code)
        from mlx_agent.files import log_tail

        self._detach(worker)
        self.state = "failed"
        self.last_error = {"code": "worker_exited", "message": f"the worker exited with status {code}",
                           "at": iso_from_timestamp(time.time()),
                           "details": {"exit_code": code, "log_path": str(worker.spec.log_path),
                                       "log_tail": log_tail(worker.spec.log_path)}}

    def start_watching(self) -> None:
        """Start the background check that notices a worker dying while nothing talks to it."""
        async def watch() -> None:
            while True:
                await asyncio.sleep(WATCH_INTERVAL_S)
                self.check_worker()

        self._watch_task = asyncio.get_running_loop().create_task(watch())

    # -- unloading --------------------------------------------------------------------------------------------

    def _detach(self, worker: WorkerProcess) -> asyncio.Task[str]:
        """Take the worker out of service now and stop it in the background; return the stopping task."""
        self.worker = None
        self.state = "unloaded"
        self._cancel_idle()
        self.idle_since = self._idle_mono = None
        task = asyncio.get_running_loop().create_task(worker.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        return task

    async def unload(self) -> dict[str, Any]:
        """Stop the worker and keep the gateway up; raise ``UnloadBlocked`` while requests or a load are open."""
        self.check_worker()
        if self.open_requests or self.open_streams or self.state == "loading":
            raise UnloadBlocked(self.open_requests, self.open_streams, self.state == "loading")
        worker = self.worker
        if worker is None:
            self.state = "unloaded"
            return {"unloaded": True, "worker_pid": None, "model_state": self.state}
        how = await asyncio.shield(self._detach(worker))
        log.info("worker %d unloaded on request (%s)", worker.pid, how)
        return {"unloaded": True, "worker_pid": worker.pid, "stopped": how, "model_state": self.state}

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
        delay = max(0.0, self._idle_mono + self.policy.idle_timeout_s - time.monotonic())
        self._idle_handle = asyncio.get_running_loop().call_later(delay, self._idle_expired)

    def _idle_expired(self) -> None:
        self._idle_handle = None
        worker = self.worker
        if (worker is None or self.state != "loaded" or self.open_requests or self.open_streams
                or not self.policy.idle_unload):
            return
        log.info("worker %d idle for %g s: unloading", worker.pid, self.policy.idle_timeout_s)
        self._detach(worker)

    # -- policy -----------------------------------------------------------------------------------------------

    async def replace_policy(self, policy: Policy) -> None:
        """Persist ``policy`` atomically, then apply it (idle timer rescheduled from when idle time started)."""
        from mlx_agent.files import write_json_atomic

        async with self._policy_lock:
            await asyncio.to_thread(write_json_atomic, self.config.policy_path, policy_document(policy))
            self.policy = policy
            if policy.min_headroom_gb is None:
                self.load_blocked_reason = None
            self._schedule_idle()

    # -- status and shutdown ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Return the gateway state document (``mlx_agent/schemas/gateway_state.json``)."""
        self.check_worker()
        worker = self.worker
        unload_at = None
        if self._idle_handle is not None and self.idle_since is not None:
            unload_at = iso_from_timestamp(self.idle_since + self.policy.idle_timeout_s)
        return {
            "format_version": STATE_VERSION,
            "pid": os.getpid(),
            "port": self.config.port,
            "model_id": self.config.model_id,
            "started_at": iso_from_timestamp(self.started_at),
            "model_state": self.state,
            "worker": None if worker is None else {
                "pid": worker.pid, "port": worker.port, "started_at": iso_from_timestamp(worker.started_at),
                "ready_at": iso_from_timestamp(worker.ready_at), "log_path": str(worker.spec.log_path)},
            "policy": self.policy.to_json(),
            "memory_check": self.memory_check,
            "load_blocked_reason": self.load_blocked_reason,
            "open_requests": self.open_requests,
            "open_streams": self.open_streams,
            "last_error": self.last_error,
            "loads": self.loads,
            "idle_since": iso_from_timestamp(self.idle_since),
            "idle_unload_at": unload_at,
        }

    async def close(self) -> None:
        """Stop everything: the watcher, a load in progress, the worker."""
        self._cancel_idle()
        if self._watch_task is not None:
            self._watch_task.cancel()
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
