"""A model's request queue: slots first come first served, requests served alone, the bound, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest

from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.models.queue import RequestQueue, served_alone

pytestmark = pytest.mark.fast


def run(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run one test coroutine on a fresh event loop."""
    asyncio.run(coroutine)


async def settle() -> None:
    """Let every ready task run until it waits again."""
    for _ in range(5):
        await asyncio.sleep(0)


class Holder:
    """A request that takes a slot and keeps it until told to leave."""

    def __init__(self, queue: RequestQueue, alone: bool = False) -> None:
        self.queue = queue
        self.alone = alone
        self.running = False
        self.release = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        self.queue.join()
        entered = False
        try:
            async with self.queue.slot(self.alone):
                self.queue.leave()
                entered = True
                self.running = True
                await self.release.wait()
        finally:
            if not entered:
                self.queue.leave()
            self.running = False


def test_requests_beyond_the_slots_wait_and_run_in_arrival_order() -> None:
    """With two slots, a third request waits until one of the first two ends, then runs."""

    async def main() -> None:
        queue = RequestQueue("m", slots=2, max_queue=8)
        a, b, c = Holder(queue), Holder(queue), Holder(queue)
        await settle()
        assert (a.running, b.running, c.running) == (True, True, False)
        assert (queue.running, queue.waiting) == (2, 1)
        b.release.set()
        await settle()
        assert (c.running, queue.running, queue.waiting) == (True, 2, 0)
        a.release.set()
        c.release.set()
        await asyncio.gather(a.task, b.task, c.task)
        assert (queue.running, queue.waiting) == (0, 0)

    run(main())


def test_a_request_served_alone_waits_for_the_running_ones_and_holds_back_those_behind_it() -> None:
    """An alone request waits for the worker to empty; requests after it wait for it even with slots free."""

    async def main() -> None:
        queue = RequestQueue("m", slots=4, max_queue=8)
        first = Holder(queue)
        await settle()
        lone = Holder(queue, alone=True)
        later = Holder(queue)
        await settle()
        assert (first.running, lone.running, later.running) == (True, False, False)
        first.release.set()
        await settle()
        assert (lone.running, later.running, queue.alone) == (True, False, True)
        lone.release.set()
        await settle()
        assert later.running and not queue.alone
        later.release.set()
        await asyncio.gather(first.task, lone.task, later.task)

    run(main())


def test_a_full_queue_refuses_the_next_request_with_queue_full_and_retry_after() -> None:
    """While max_queue requests wait, join raises the 503 queue_full refusal and counts it."""

    async def main() -> None:
        queue = RequestQueue("m", slots=1, max_queue=1)
        running, waiting = Holder(queue), Holder(queue)
        await settle()
        with pytest.raises(RequestRefused) as caught:
            queue.join()
        refusal = caught.value
        assert (refusal.status, refusal.code, refusal.headers) == (503, "queue_full", {"Retry-After": "5"})
        assert (refusal.extra["waiting"], refusal.extra["max_queue"], queue.queue_full) == (1, 1, 1)
        running.release.set()
        waiting.release.set()
        await asyncio.gather(running.task, waiting.task)

    run(main())


def test_a_cancelled_waiter_leaves_the_queue_and_lets_the_next_one_run() -> None:
    """A waiting request cancelled (its client left) is uncounted at once and skipped when a slot frees."""

    async def main() -> None:
        queue = RequestQueue("m", slots=1, max_queue=8)
        running, gone, next_one = Holder(queue), Holder(queue), Holder(queue)
        await settle()
        assert queue.waiting == 2
        gone.task.cancel()
        await settle()
        assert queue.waiting == 1
        running.release.set()
        await settle()
        assert next_one.running and queue.running == 1
        next_one.release.set()
        await asyncio.gather(running.task, next_one.task)
        assert gone.task.cancelled() and (queue.running, queue.waiting) == (0, 0)

    run(main())


def test_a_lone_waiter_cancelled_at_the_head_frees_those_behind_it() -> None:
    """When an alone request at the head of the queue is cancelled, shared requests behind it run at once."""

    async def main() -> None:
        queue = RequestQueue("m", slots=4, max_queue=8)
        first = Holder(queue)
        await settle()
        lone, later = Holder(queue, alone=True), Holder(queue)
        await settle()
        assert (later.running, queue.running) == (False, 1)
        lone.task.cancel()
        await settle()
        assert later.running and queue.running == 2
        first.release.set()
        later.release.set()
        await asyncio.gather(first.task, later.task)

    run(main())


def test_unknown_slots_hold_nothing_back() -> None:
    """With the worker's concurrency unknown (None) every request runs at once; only a lone one waits."""

    async def main() -> None:
        queue = RequestQueue("m", slots=None, max_queue=8)
        holders = [Holder(queue) for _ in range(40)]
        await settle()
        assert queue.running == 40 and queue.waiting == 0
        for holder in holders:
            holder.release.set()
        await asyncio.gather(*(h.task for h in holders))

    run(main())


@pytest.mark.parametrize(
    ("body", "greedy_alone", "alone"),
    [
        ({"messages": []}, False, False),
        ({"seed": 3}, False, True),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, False, True),
        ({}, True, True),
        ({"temperature": 0.7}, True, False),
        ({"logprobs": True}, True, False),
        ({"repetition_penalty": 1.1}, True, False),
    ],
)
def test_which_requests_the_worker_serves_alone(body: dict[str, Any], greedy_alone: bool, alone: bool) -> None:
    """A seed or an image is served alone; under prompt lookup so is a plain greedy request."""
    assert served_alone(body, greedy_alone) is alone
