"""One model's request queue: who waits for its worker, who runs in it, and the bound on waiting.

A request *waits* from when the front takes it until it holds one of the worker's slots on a ready worker: behind
a cold load, behind a request the worker serves alone, or for a slot while the worker runs as many as it can
(``worker_slots``: mlx_lm's decode concurrency, or 1 when it serves one request at a time). While ``max_queue``
requests wait, the next is refused at once (503 ``queue_full`` with ``Retry-After``) instead of joining. Waiting
is an ``await`` in the request's own handler task, so a client that hangs up (aiohttp cancels its handler) leaves
the queue at that moment. Slots are granted first come, first served: a request the worker serves alone (a
``seed``, images, a greedy request under ``--prompt-lookup``) waits for every running one to end, and the
requests behind it wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import refused

if TYPE_CHECKING:
    from mlx_agent.records.front import QueueState

QUEUE_RETRY_AFTER_S = 5  # a queue drains by the request, not by the load: a short wait is worth a retry


class RequestQueue:
    """The waiting and running requests of one model, first come, first served."""

    def __init__(self, name: str, slots: int | None, max_queue: int) -> None:
        self.name = name
        self.slots = slots  # None: the worker's own concurrency is unknown, so only the wait for a load is held
        self.max_queue = max_queue
        self.waiting = 0
        self.running = 0
        self.alone = False  # a request the worker serves alone is running
        self.queue_full = 0  # refusals so far
        self._waiters: deque[tuple[asyncio.Future[None], bool]] = deque()

    def state(self, memory_refusals: int) -> QueueState:
        """Return the queue as status shows it (with the model's ``insufficient_memory`` refusals)."""
        return {
            "waiting": self.waiting,
            "running": self.running,
            "slots": self.slots,
            "max_queue": self.max_queue,
            "queue_full": self.queue_full,
            "insufficient_memory": memory_refusals,
        }

    def join(self) -> None:
        """Count a request as waiting; refuse it (503 ``queue_full``) when ``max_queue`` wait already."""
        if self.waiting >= self.max_queue:
            self.queue_full += 1
            raise self.full()
        self.waiting += 1

    def leave(self) -> None:
        """Uncount a waiting request (it runs now, or it gave up)."""
        self.waiting -= 1

    def full(self) -> RequestRefused:
        """Return the refusal of a request that finds the queue full."""
        return refused(
            Code.QUEUE_FULL,
            f"{self.waiting} request(s) already wait for {self.name} (--max-queue {self.max_queue}); "
            f"retry after {QUEUE_RETRY_AFTER_S} s, or serve with a larger --max-queue",
            headers={"Retry-After": str(QUEUE_RETRY_AFTER_S)},
            extra={"waiting": self.waiting, "running": self.running, "max_queue": self.max_queue},
        )

    @contextlib.asynccontextmanager
    async def slot(self, alone: bool) -> AsyncIterator[None]:
        """Hold one of the worker's slots (all of them when ``alone``) while the block runs."""
        await self._acquire(alone)
        try:
            yield
        finally:
            self._release(alone)

    def _free(self, alone: bool) -> bool:
        if self.alone:
            return False
        if alone:
            return self.running == 0
        return self.slots is None or self.running < self.slots

    def _grant(self, alone: bool) -> None:
        self.running += 1
        self.alone = alone

    async def _acquire(self, alone: bool) -> None:
        if not self._waiters and self._free(alone):
            self._grant(alone)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (future, alone)
        self._waiters.append(entry)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self._release(alone)  # granted as it was cancelled: give the slot on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(entry)
                self._wake()  # a request alone at the head may have held back those behind it
            raise

    def _release(self, alone: bool) -> None:
        self.running -= 1
        if alone or self.running == 0:
            self.alone = False
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            future, alone = self._waiters[0]
            if future.done():
                self._waiters.popleft()
                continue
            if not self._free(alone):
                return
            self._waiters.popleft()
            self._grant(alone)
            future.set_result(None)


def _has_image(messages: object) -> bool:
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") in ("image_url", "input_image", "image"):
                return True
    return False


def served_alone(body: dict[str, Any], greedy_alone: bool) -> bool:
    """Say whether the worker serves this request alone (mlx_lm: a ``seed``, images; greedy under prompt lookup)."""
    if body.get("seed") is not None or _has_image(body.get("messages")):
        return True
    if not greedy_alone:
        return False
    sampled = body.get("temperature") not in (None, 0, 0.0)
    steering = ("logit_bias", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty")
    steered = any(body.get(k) for k in steering)
    return not sampled and not steered and body.get("repetition_penalty") in (None, 0)
