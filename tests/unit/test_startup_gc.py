"""Fronts and workers import with the cyclic collector paused, then freeze those objects and collect as usual."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from mlx_agent.runtime import entry
from mlx_agent.startup_gc import collector_paused

pytestmark = pytest.mark.fast


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    """Give this test process its collector back as it was: running, nothing frozen."""
    was_enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if was_enabled:
        gc.enable()


def test_the_block_runs_paused_and_what_it_made_is_frozen() -> None:
    """Inside the block the collector is off; after it, it is on and the block's objects are in the frozen set."""
    gc.unfreeze()
    with collector_paused():
        inside = gc.isenabled()
        made = [[index] for index in range(1000)]
    assert (inside, gc.isenabled()) == (False, True)
    assert gc.get_freeze_count() >= len(made)


def test_a_failing_block_still_resumes_the_collector() -> None:
    """An exception in the block (a refused start) leaves the collector running."""
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("refused")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    """A caller that had turned the collector off keeps it off."""
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_a_worker_imports_its_runtime_paused_and_serves_with_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's entry imports the runtime with the collector off and starts it with the collector on."""
    seen: dict[str, bool] = {}

    def start(argv: list[str]) -> int:
        seen["serving"] = gc.isenabled()
        return 0

    def load(name: str) -> Any:
        seen["importing"] = gc.isenabled()
        return start

    monkeypatch.setattr(entry, "load_entry", load)
    assert entry.main(["mlx_lm", "--model", "/nowhere"]) == 0
    assert seen == {"importing": False, "serving": True}


def test_a_front_serves_with_the_collector_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The front reads its config with the collector off and runs its event loop with it on."""
    import uvloop

    from mlx_agent import spawn
    from mlx_agent.gateway import __main__ as front
    from mlx_agent.gateway.door import app, config

    seen: dict[str, bool] = {}

    def read(path: Any) -> dict[str, Any]:
        seen["reading"] = gc.isenabled()
        return {}

    def run(coroutine: Any) -> int:
        seen["serving"] = gc.isenabled()
        coroutine.close()
        return 0

    async def serve(*args: Any) -> int:
        return 0

    monkeypatch.setattr(spawn, "await_word", lambda: True)
    monkeypatch.setattr(spawn, "refuse_if_interpreter_moved", lambda: None)
    monkeypatch.setattr(config, "load_config", read)
    monkeypatch.setattr(app, "read_secrets", lambda config: None)
    monkeypatch.setattr(app, "serve", serve)
    monkeypatch.setattr(uvloop, "run", run)
    assert front.main(["--config", str(tmp_path / "front.json")]) == 0
    assert seen == {"reading": False, "serving": True}


def test_a_front_that_is_never_recorded_leaves_with_the_collector_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A front whose supervisor ended before recording it returns 1 from inside the paused block, collector on."""
    from mlx_agent import spawn
    from mlx_agent.gateway import __main__ as front

    monkeypatch.setattr(spawn, "await_word", lambda: False)
    assert front.main(["--config", "/nowhere/front.json"]) == 1
    assert gc.isenabled()
