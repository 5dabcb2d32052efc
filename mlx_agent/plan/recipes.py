"""Runtime recipes: one JSON file per runtime in ``recipes/`` (shipped inside the wheel), typed as ``records.Recipe``.

A recipe's file stem, its ``name`` and the plan's ``runtime.name`` are one spelling (``mlx_lm``, ``mlx-vlm``:
the plan's values, part of the --json contract, so the files follow them). The shipped files are checked
against the record and ``schemas/recipe.json`` by tests/unit/test_recipes.py rather than at every preview,
which would import pydantic (about 140 ms) for files that come with the package and are bound by sha256.
"""

from __future__ import annotations

import hashlib
import json

from mlx_agent.errors.commands import UnsupportedRuntime
from mlx_agent.resources import recipes_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.records.plan import Recipe

AUTO = "auto"


def recipe_names() -> list[str]:
    """Return the names of the runtimes mlx-agent has recipes for."""
    return sorted(p.stem for p in recipes_dir().glob("*.json"))


def runtime_choices() -> list[str]:
    """Return what ``--runtime`` accepts: every recipe, and ``auto``."""
    return [*recipe_names(), AUTO]


def load_recipe(name: str) -> tuple[Recipe, str]:
    """Return a runtime's recipe and the sha256 of its file."""
    if name not in recipe_names():
        raise UnsupportedRuntime(f"no recipe for runtime {name!r}", details={"runtime": name, "known": recipe_names()})
    raw = (recipes_dir() / f"{name}.json").read_bytes()
    recipe: Recipe = json.loads(raw)
    return recipe, hashlib.sha256(raw).hexdigest()
