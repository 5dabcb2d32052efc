"""Ollama's per-request ``keep_alive``: how long a model stays loaded after a request, within the server's policy.

The rule (docs/ollama.md, "keep_alive"):

* The server's policy is the outer bound: a model the plan keeps loaded (``keep_loaded``, or an eager model's
  ``preload``) is never unloaded by a request, and no request keeps a model longer than the policy's
  ``idle_timeout`` (``-1`` and durations past it leave the policy's timer as it is).
* A shorter ``keep_alive`` unloads the model that long after the request ended (``0``: at once), unless the
  model was used since (any API: a later request's own rule then applies, as in Ollama, where the last request
  sets the expiry) or is busy then; a request without ``keep_alive`` leaves the policy's timer.

``expires_at`` answers ``/api/ps``: this request's deadline when one holds, else when the policy's idle timer
unloads the model (from now for a busy model), else ``FOREVER``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlx_agent.errors import UnloadBlocked
from mlx_agent.files import utc_iso
from mlx_agent.gateway.ollama.request import KEEP

if TYPE_CHECKING:
    from mlx_agent.gateway.models.lifecycle import Lifecycle

FOREVER = "9999-12-31T23:59:59Z"  # what Ollama's clients read as "never" (Ollama writes a far-off date too)
log = logging.getLogger("mlx_agent.gateway")


@dataclass
class Deadline:
    """One request's keep_alive on a model: set when the request ended, due ``seconds`` later."""

    set_at: float  # time.time() when the request ended
    seconds: float
    handle: asyncio.TimerHandle

    @property
    def due(self) -> float:
        """Return when the model is unloaded (time.time())."""
        return self.set_at + self.seconds


class KeepAlive:
    """The deadlines Ollama requests set, one per model at most (the latest request's)."""

    def __init__(self) -> None:
        self.deadlines: dict[str, Deadline] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def after(self, model: Lifecycle, seconds: float | None) -> bool:
        """Apply a finished request's ``keep_alive`` (seconds, ``KEEP``, None); say whether it set a deadline."""
        old = self.deadlines.pop(model.name, None)
        if old is not None:
            old.handle.cancel()
        policy = model.policy
        if seconds is None or seconds == KEEP:
            return False
        if policy.keep_loaded or model.model["policy"]["preload"]:
            log.info("%s: keep_alive %g s ignored: the server's policy keeps this model loaded", model.name, seconds)
            return False
        if policy.idle_unload and seconds >= policy.idle_timeout:
            return False  # the policy's own timer comes first
        handle = asyncio.get_running_loop().call_later(seconds, self._due, model)
        self.deadlines[model.name] = Deadline(time.time(), seconds, handle)
        return True

    def _due(self, model: Lifecycle) -> None:
        deadline = self.deadlines.pop(model.name, None)
        if deadline is None or not self.holds(model, deadline):
            return
        task = asyncio.get_running_loop().create_task(self._unload(model, deadline.seconds))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    @staticmethod
    def holds(model: Lifecycle, deadline: Deadline) -> bool:
        """Say whether a deadline still applies: the model is loaded, idle, and unused since it was set."""
        return model.worker is not None and not model.busy and (model.last_used or 0.0) <= deadline.set_at

    async def _unload(self, model: Lifecycle, seconds: float) -> None:
        with contextlib.suppress(UnloadBlocked):  # a request arrived meanwhile: its own rule applies
            await model.unload(f"after keep_alive {seconds:g} s")

    def expires_at(self, model: Lifecycle) -> str:
        """Return when ``model`` is unloaded unless it is used again (module docstring)."""
        deadline = self.deadlines.get(model.name)
        if deadline is not None and self.holds(model, deadline):
            return utc_iso(deadline.due) or FOREVER
        policy = model.policy
        if not policy.idle_unload or model.model["policy"]["preload"]:
            return FOREVER
        since = model.idle_since if not model.busy and model.idle_since is not None else time.time()
        return utc_iso(since + policy.idle_timeout) or FOREVER
