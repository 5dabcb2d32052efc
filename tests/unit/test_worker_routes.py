"""The worker's routes are declared once (``worker_routes``), and both processes read them from there."""

from __future__ import annotations

import ast

import pytest

from mlx_agent.resources import PACKAGE_DIR
from mlx_agent.worker_routes import BodyKind, WorkerRoute

pytestmark = pytest.mark.fast

# The front's own route table names the paths clients call; some are spelled like a worker's on purpose.
FRONT_ROUTE_TABLE = PACKAGE_DIR / "gateway" / "door" / "endpoints.py"


def test_a_path_names_its_route_and_no_other() -> None:
    """Each route is found by its path, and a path no worker answers (mlx_lm's unversioned alias too) is None."""
    assert [WorkerRoute.at(route.path) for route in WorkerRoute] == list(WorkerRoute)
    assert WorkerRoute.at("/chat/completions") is None and WorkerRoute.at("/v1/messages") is None


def test_each_route_says_what_its_body_carries() -> None:
    """A chat's messages are rendered by the template; a completion's prompt is not; embeddings take inputs."""
    kinds = {route: route.kind for route in WorkerRoute}
    assert kinds[WorkerRoute.CHAT] is BodyKind.MESSAGES and kinds[WorkerRoute.COMPLETIONS] is BodyKind.PROMPT
    assert kinds[WorkerRoute.EMBEDDINGS] is BodyKind.INPUT


def test_no_module_of_either_process_spells_a_worker_path() -> None:
    """gateway/ and runtime/ take a worker path from ``WorkerRoute``, never from a string literal of their own."""
    paths = {route.path for route in WorkerRoute}
    spelled = [
        f"{source.relative_to(PACKAGE_DIR)}:{node.lineno} {node.value}"
        for room in ("gateway", "runtime")
        for source in sorted((PACKAGE_DIR / room).rglob("*.py"))
        if source != FRONT_ROUTE_TABLE
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in paths
    ]
    assert spelled == []
