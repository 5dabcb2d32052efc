"""Runtime recipes: one JSON file per runtime in ``recipes/`` (shipped inside the wheel)."""

from __future__ import annotations

import hashlib
import json

from mlx_agent.errors import UnsupportedRuntime
from mlx_agent.resources import recipes_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

AUTO = "auto"


def recipe_names() -> list[str]:
    """Return the names of the runtimes mlx-agent has recipes for."""
    return sorted(p.stem for p in recipes_dir().glob("*.json"))


def runtime_choices() -> list[str]:
    """Return what ``--runtime`` accepts: every recipe, and ``auto``."""
    return [*recipe_names(), AUTO]


def load_recipe(name: str) -> tuple[dict[str, Any], str]:
    """Return a runtime's recipe and the sha256 of its file."""
    if name not in recipe_names():
        raise UnsupportedRuntime(f"no recipe for runtime {name!r}", details={"runtime": name, "known": recipe_names()})
    raw = (recipes_dir() / f"{name}.json").read_bytes()
    return json.loads(raw), hashlib.sha256(raw).hexdigest()
