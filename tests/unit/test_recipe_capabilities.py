"""A runtime gets batching, vision and groups from its recipe's capabilities, never from its name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, cast

import pytest

from mlx_agent.errors.commands import DistributedUnsupported, RuntimeModelMismatch
from mlx_agent.plan import group, recipes, runtime_select
from mlx_agent.plan.front import worker_slots
from mlx_agent.plan.group import group_plan
from mlx_agent.plan.model_plan import model_kind
from mlx_agent.plan.recipes import load_recipe
from mlx_agent.plan.requests import ModelRequest
from mlx_agent.plan.runtime_select import select_runtime
from mlx_agent.records.plan import ModelPlan
from mlx_agent.resources import recipes_dir

pytestmark = pytest.mark.fast

VISION_CONFIG = {"model_type": "llama", "vision_config": {"hidden_size": 8}}
TEXT_CONFIG = {"model_type": "llama"}
CAPABILITIES = ("batch_slots", "serial_with", "vision", "groups")


@pytest.fixture
def throwaway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Return a recipes folder holding the shipped recipes and two new runtimes over mlx_lm's package.

    ``toy-all`` declares every capability (4 slots, never serial, vision, groups); ``toy-none`` declares none.
    """
    folder = tmp_path / "recipes"
    shutil.copytree(recipes_dir(), folder)
    base = json.loads((recipes_dir() / "mlx_lm.json").read_text())
    plain = {k: v for k, v in base["capabilities"].items() if k not in CAPABILITIES}
    every = {**plain, "batch_slots": 4, "serial_with": [], "vision": True, "groups": True}
    for name, capabilities in {"toy-all": every, "toy-none": plain}.items():
        (folder / f"{name}.json").write_text(json.dumps({**base, "name": name, "capabilities": capabilities}))
    monkeypatch.setattr(recipes, "recipes_dir", lambda: folder)
    # The installed packages are read, never imported; a fast test reads none: every package has a llama class.
    monkeypatch.setattr(runtime_select, "model_support", lambda package, paths: ({"llama"}, {}))
    return folder


def model(runtime: str, *, draft: bool = False) -> ModelPlan:
    """Return the parts of a model's plan that its worker slots read."""
    return cast(ModelPlan, {"runtime": {"name": runtime}, "draft": {} if draft else None, "kv_cache": None})


def group_refusal(runtime: str) -> DistributedUnsupported:
    """Return the refusal of a two-host group of a model whose type mlx_lm has no class for."""
    spec = ModelRequest(hosts="127.0.0.1,127.0.0.2", runtime=runtime)
    source: dict[str, Any] = {"model_type": "no-such-type", "files": [], "path": "/m"}  # sharding refuses it
    wrapped = {"launcher": "wrapped"}
    with pytest.raises(DistributedUnsupported) as caught:
        group_plan(spec, load_recipe(runtime)[0], wrapped, source, {}, refused={}, hostfile_path=Path("/h"))
    return caught.value


def test_batch_slots_come_from_the_recipe(throwaway: Path) -> None:
    """A runtime batches as many as its recipe says, serially only under the options it names, else not at all."""
    assert worker_slots(model("toy-all")) == 4 and worker_slots(model("toy-all", draft=True)) == 4
    assert worker_slots(model("toy-none")) is None
    assert worker_slots(model("mlx_lm")) == 32 and worker_slots(model("mlx_lm", draft=True)) == 1
    assert worker_slots(model("mlx-vlm")) is None


def test_vision_comes_from_the_recipe(throwaway: Path) -> None:
    """A vision checkpoint is a vision model only for a runtime with the capability; one without refuses it."""
    assert model_kind(load_recipe("toy-all")[0], VISION_CONFIG) == "vision"
    assert model_kind(load_recipe("toy-all")[0], TEXT_CONFIG) == "text"
    assert model_kind(load_recipe("toy-none")[0], VISION_CONFIG) == "text"
    with pytest.raises(RuntimeModelMismatch):
        select_runtime("toy-none", VISION_CONFIG, None)
    assert select_runtime("toy-all", VISION_CONFIG, None)[0] == "toy-all"


def test_groups_come_from_the_recipe(throwaway: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a runtime with the groups capability gets past the runtime check to the model's own (sharding)."""
    asked: list[tuple[str, ...]] = []

    def architecture(*args: str) -> tuple[bool, bool]:
        asked.append(args)
        return False, False  # no class of this type shards or pipelines

    monkeypatch.setattr(group, "_architecture", architecture)
    assert group_refusal("toy-none").details.get("runtime") == "toy-none"
    assert group_refusal("toy-all").details.get("parallelism") == "tensor"
    assert group_refusal("mlx-vlm").details.get("runtime") == "mlx-vlm"
    assert asked == [("toy-all", "mlx_lm", "no-such-type")]  # the recipe's package is read, not mlx_lm's name
