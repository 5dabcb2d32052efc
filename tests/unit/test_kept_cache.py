"""The kept prompt cache's directory follows the model's identity: same model, same directory; any change, another."""

from __future__ import annotations

import copy
from pathlib import Path

from mlx_agent.kept_cache import cache_dir
from mlx_agent.plan.front import model_config
from tests.plan_support import plan_for


def test_the_same_reviewed_model_keeps_one_directory(tiny_model: Path) -> None:
    """Two plans of one unchanged model name the same directory, under the home's prompt-cache root."""
    first = cache_dir(model_config(plan_for(tiny_model)["models"][0]))
    second = cache_dir(model_config(plan_for(tiny_model)["models"][0]))
    assert first is not None and first == second and first.parent.name == "prompt-cache"


def test_what_decides_the_cache_changes_the_directory(tiny_model: Path) -> None:
    """A changed bound file, template argument or runtime file moves the cache; none is kept at 0 GB."""
    model = plan_for(tiny_model)["models"][0]
    base = cache_dir(model_config(model))
    changed_file = copy.deepcopy(model)
    changed_file["source"]["files"][0]["size"] += 1
    templated = plan_for(tiny_model, thinking="off")["models"][0]
    changed_runtime = copy.deepcopy(model)
    changed_runtime["runtime_checks"][0]["sha256"] = "0" * 64
    others = {cache_dir(model_config(m)) for m in (changed_file, templated, changed_runtime)}
    assert base not in others and len(others) == 3
    assert cache_dir(model_config(plan_for(tiny_model, prompt_cache_disk_gb=0)["models"][0])) is None
