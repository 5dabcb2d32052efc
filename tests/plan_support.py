"""Serve plans built the way the CLI builds them, and a runtime from another environment, for the plan tests."""

from __future__ import annotations

import stat
import sys
from pathlib import Path
from typing import Any

from mlx_agent.canonical import with_hash
from mlx_agent.plan.requests import ServeRequest
from mlx_agent.plan.serve_plan import build_serve_plan
from mlx_agent.records.plan import ServePlan


def plan_for(model: Path, **kw: Any) -> ServePlan:
    """Return the hashed plan for a model path with extra request fields."""
    return with_hash(build_serve_plan(ServeRequest(path=str(model), port=18999, **kw)))


def native_executable(tmp_path: Path) -> Path:
    """Return an executable runtime from "another environment" (this interpreter, launched natively)."""
    exe = tmp_path / "mlx_lm.server"
    exe.write_text(f"#!{sys.executable}\nprint('server')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe
