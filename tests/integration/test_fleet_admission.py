"""A fleet makes room for a cold load: max-loaded and memory eviction, least recently used first, never a busy model.

The fleet runs in-process with stand-in worker processes (really spawned). The one thing replaced is the
reading of available memory: a test cannot make this machine short of memory on cue, so the fleet reads a
ledger instead (a fixed total less the estimate of every model it has loaded), which is what a real
machine's figure does when models load and unload.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.config import parse_config
from mlx_agent.gateway.models import fleet as fleet_module
from mlx_agent.gateway.models.fleet import Fleet
from mlx_agent.load_memory import memory_estimate
from mlx_agent.policy import Policy
from tests.gateway_support import fake_worker_argv, gateway_config

GB = 1_000_000_000
WEIGHTS = 4 * GB  # each model's estimate is 4.4 GB + 1.5 GB = 5.9 GB


def fleet_config(tmp_path: Path, names: list[str], **front: Any) -> dict[str, Any]:
    """Return a front config with one stand-in model per name, each of ``WEIGHTS`` bytes."""
    config = gateway_config(tmp_path, 9, fake_worker_argv(tmp_path), model_path=tmp_path, weight_bytes=WEIGHTS)
    first = config["models"][0]
    config["models"] = []
    for index, name in enumerate(names):
        model = copy.deepcopy(first)
        model.update(served_model_name=name, hidden_names=[])
        model["worker"]["log_path"] = str(tmp_path / f"worker-{index}.log")
        config["models"].append(model)
    config.update(front)
    return config


def run(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    names: list[str],
    body: Callable[[Fleet], Coroutine[Any, Any, None]],
    total: int | None = None,
    **front: Any,
) -> None:
    """Run ``body`` against a fleet whose available memory is ``total`` less what it has loaded."""
    fleet = Fleet(parse_config(fleet_config(tmp_path, names, **front)))

    def available() -> int | None:
        if total is None:
            return None
        return total - sum(memory_estimate(m.model["weight_bytes"]) or 0 for m in fleet.models if m.worker)

    async def main() -> None:
        try:
            await body(fleet)
        finally:
            await fleet.close()

    monkeypatch.setattr(fleet_module, "available_memory", available)
    asyncio.run(main())


def loaded(fleet: Fleet) -> list[str]:
    """Return the names of the loaded models."""
    return [m.name for m in fleet.models if m.state == "loaded"]


def test_memory_evicts_the_least_recently_used_idle_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With room for two, a third cold load unloads the least recently used one and counts the eviction."""

    async def body(fleet: Fleet) -> None:
        a, b, c = fleet.models
        await a.acquire()
        await b.acquire()
        a.request_started(stream=False)
        a.request_finished(stream=False)  # a is now the more recently used of the two
        await c.acquire()
        assert loaded(fleet) == ["a", "c"]
        assert (b.evictions, a.evictions, b.worker) == (1, 0, None)
        assert c.memory_check is not None and c.memory_check["ok"]

    run(monkeypatch, tmp_path, ["a", "b", "c"], body, total=12 * GB, min_headroom_gb=0)


def test_a_busy_model_is_never_evicted_and_the_refusal_names_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """When every loaded model has open work, the cold load is 503 insufficient_headroom naming what holds memory."""

    async def body(fleet: Fleet) -> None:
        a, b = fleet.models
        await a.acquire()
        a.request_started(stream=True)
        with pytest.raises(RequestRefused) as refused:
            await b.acquire()
        error = refused.value
        assert (error.status, error.code) == (503, "insufficient_headroom")
        assert "a (0 open request(s), 1 open stream(s))" in error.message
        assert error.extra["held_by"][0]["name"] == "a" and error.extra["held_by"][0]["open_streams"] == 1
        assert error.headers["Retry-After"]
        assert (a.state, a.evictions, b.state, b.load_blocked_reason) == (
            "loaded",
            0,
            "unloaded",
            "insufficient_headroom",
        )
        a.request_finished(stream=True)
        await b.acquire()  # now a is idle and may go
        assert loaded(fleet) == ["b"] and a.evictions == 1

    run(monkeypatch, tmp_path, ["a", "b"], body, total=7 * GB, min_headroom_gb=0)


def test_keep_loaded_models_go_last(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A keep_loaded model is evicted only when no other idle model is left, even if it is the least recent."""

    async def body(fleet: Fleet) -> None:
        a, b, c = fleet.models
        a.replace_policy(Policy(0, keep_loaded=True))
        await a.acquire()
        await b.acquire()
        await c.acquire()  # a is the least recently used, but keeps loaded: b goes
        assert loaded(fleet) == ["a", "c"] and b.evictions == 1
        await b.acquire()  # only a and c are left; c is not keep_loaded: c goes
        assert loaded(fleet) == ["a", "b"] and c.evictions == 1

    run(monkeypatch, tmp_path, ["a", "b", "c"], body, total=12 * GB, min_headroom_gb=0)


def test_max_loaded_evicts_without_a_memory_reserve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--max-loaded 1 unloads the idle model before another loads, and refuses (too_many_loaded) while it is busy."""

    async def body(fleet: Fleet) -> None:
        a, b = fleet.models
        await a.acquire()
        await b.acquire()
        assert loaded(fleet) == ["b"] and a.evictions == 1
        b.request_started(stream=False)
        with pytest.raises(RequestRefused) as refused:
            await a.acquire()
        assert (refused.value.status, refused.value.code) == (503, "too_many_loaded")
        assert fleet.metrics.refusals.labels("a", "too_many_loaded")._value.get() == 1
        b.request_finished(stream=False)

    run(monkeypatch, tmp_path, ["a", "b"], body, max_loaded=1)


def test_unknown_memory_is_refused_rather_than_evicting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """When memory cannot be read, nothing is evicted and the load is 503 memory_unknown."""

    async def body(fleet: Fleet) -> None:
        a, b = fleet.models
        fleet.min_headroom_gb = None
        await a.acquire()
        fleet.min_headroom_gb = 1
        with pytest.raises(RequestRefused) as refused:
            await b.acquire()
        assert refused.value.code == "memory_unknown" and a.state == "loaded" and a.evictions == 0

    run(monkeypatch, tmp_path, ["a", "b"], body, total=None)


def test_concurrent_cold_loads_of_two_models_are_one_load_each(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Eight concurrent acquires of each of two models start exactly one worker per model, one load at a time."""

    async def body(fleet: Fleet) -> None:
        a, b = fleet.models
        workers = await asyncio.gather(*(m.acquire() for m in [a, b] * 8))
        assert {w.pid for w in workers[0::2]} == {a.worker.pid}  # type: ignore[union-attr]
        assert {w.pid for w in workers[1::2]} == {b.worker.pid}  # type: ignore[union-attr]
        assert (a.loads, b.loads) == (1, 1)

    run(monkeypatch, tmp_path, ["a", "b"], body, total=100 * GB, min_headroom_gb=0)
