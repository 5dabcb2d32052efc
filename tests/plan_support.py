"""Serve plans built the way the CLI builds them, for the tests of what a plan holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlx_agent.canonical import with_hash
from mlx_agent.plan.requests import ServeRequest
from mlx_agent.plan.serve_plan import build_serve_plan
from mlx_agent.records.plan import ServePlan


def plan_for(model: Path, **kw: Any) -> ServePlan:
    """Return the hashed plan for a model path with extra request fields."""
    return with_hash(build_serve_plan(ServeRequest(path=str(model), port=18999, **kw)))
