"""README's table of plan and receipt fields, checked against a real CLI preview and the receipt of its launch."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli_launch import Launched

REPO = Path(__file__).resolve().parents[2]
HEADING = "### Plan and receipt fields"
PATH = re.compile(r"`([a-z_]+(?:\[\])?(?:\.[a-z_0-9]+(?:\[\])?)*)`")


def documented_paths() -> list[str]:
    """Return every backticked path in the first cell of the README table under ``HEADING``."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [path for row in rows for path in PATH.findall(row.split("|")[1])]


def missing(document: Any, path: list[str]) -> list[str]:
    """Return where ``path`` (``name[]``: every element of a list) is absent from ``document``."""
    if not path:
        return []
    head, rest = path[0], path[1:]
    key = head.removesuffix("[]")
    if not isinstance(document, dict) or key not in document:
        return [key]
    value = document[key]
    if not head.endswith("[]"):
        return missing(value, rest)
    if not isinstance(value, list) or not value:
        return [f"{key}[] (no elements)"]
    return [f"{key}[].{gap}" for item in value for gap in missing(item, rest)]


def field_paths(document: Any, prefix: str) -> Iterator[str]:
    """Yield the path of every key in ``document``, in the table's spelling (``name[]``: each element's keys)."""
    if isinstance(document, dict):
        for key, value in document.items():
            yield f"{prefix}.{key}"
            yield from field_paths(value, f"{prefix}.{key}")
    elif isinstance(document, list):
        for item in document:
            yield from field_paths(item, f"{prefix}[]")


def under(path: str, ancestor: str) -> bool:
    """Say whether ``path`` lies inside the record or list at ``ancestor``."""
    return path.startswith((f"{ancestor}.", f"{ancestor}[]"))


def undocumented(paths: Iterable[str], documented: list[str]) -> list[str]:
    """Return the outermost of ``paths`` that the table neither names, nor holds within a named record, nor opens."""
    gaps = {
        path
        for path in paths
        if not any(path == known or under(path, known) or under(known, path) for known in documented)
    }
    return sorted(path for path in gaps if not any(under(path, gap) for gap in gaps))


@pytest.fixture
def documents(lookup_launch: Launched) -> dict[str, Any]:
    """Return the plan and the receipt of the server with both accelerations the CLI previewed and launched."""
    return {"plan": lookup_launch.plan, "receipt": lookup_launch.receipt}


def test_the_table_documents_the_seed_names() -> None:
    """The table lists both acceleration records under the spec's names, in the plan and in the receipt."""
    paths = documented_paths()
    for record in ("decode_profile", "prefill_kernel"):
        assert f"plan.models[].{record}.requested" in paths
        assert f"receipt.models[].{record}" in paths


@pytest.mark.parametrize("path", [p for p in documented_paths() if p.startswith("plan.")])
def test_every_documented_plan_field_is_in_a_real_preview(documents: dict[str, Any], path: str) -> None:
    """Each plan path of the README table is present in the plan a real ``serve start`` preview prints."""
    assert missing(documents, path.split(".")) == []


@pytest.mark.parametrize("path", [p for p in documented_paths() if p.startswith("receipt.")])
def test_every_documented_receipt_field_is_in_the_real_receipt(documents: dict[str, Any], path: str) -> None:
    """Each receipt path of the README table is present in the receipt that confirming that preview wrote."""
    assert missing(documents, path.split(".")) == []


def test_every_field_of_a_real_preview_is_in_the_table(documents: dict[str, Any]) -> None:
    """The other way: each field of the plan a real preview prints is in the table, itself or in its record."""
    assert undocumented(field_paths(documents["plan"], "plan"), documented_paths()) == []


def test_a_field_missing_from_the_table_is_found() -> None:
    """A plan field the table does not name is reported once, at its outermost record; named ones are not."""
    plan = {"port": 1, "models": [{"source": {"path": "/m", "kind": "path"}, "env": {"A": "1"}, "draft": {"x": 1}}]}
    documented = ["plan.port", "plan.models[].source.path", "plan.models[].draft"]
    found = undocumented(field_paths(plan, "plan"), documented)
    assert found == ["plan.models[].env", "plan.models[].source.kind"]
