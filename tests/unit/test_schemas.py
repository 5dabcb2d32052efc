"""The shipped JSON Schemas: the generated ones match records/, and every schema is itself valid."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.fast

SCHEMAS = REPO_ROOT / "schemas"


def generator() -> object:
    """Import scripts/schemas (a script without a .py suffix) as a module."""
    loader = importlib.machinery.SourceFileLoader("schemas_script", str(REPO_ROOT / "scripts" / "schemas"))
    spec = importlib.util.spec_from_loader("schemas_script", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "name",
    [
        "serve_plan",
        "serve_receipt",
        "front_config",
        "front_state",
        "front_policy",
        "recipe",
        "models_listing",
        "pull_preview",
        "pull_progress",
        "pull_result",
    ],
)
def test_generated_schemas_match_the_records(name: str) -> None:
    """Each generated schema is exactly what scripts/schemas writes from records/ now."""
    script = generator()
    assert (SCHEMAS / f"{name}.json").read_text() == script.text(name), "run scripts/schemas"  # type: ignore[attr-defined]


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.json")), ids=lambda p: Path(p).stem)
def test_every_schema_is_a_valid_draft_2020_12_schema(path: Path) -> None:
    """Every shipped schema passes the metaschema and names itself by its file."""
    schema = json.loads(path.read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$id"] == f"mlx-agent/{path.name}"


def test_the_training_schema_holds_the_table_of_hyperparameters() -> None:
    """training_plan.json's hyperparameters are TRAINED's rows, all required, each fixed one its constant."""
    from mlx_agent.plan.training import TRAINED

    hp = json.loads((SCHEMAS / "training_plan.json").read_text())["properties"]["hyperparameters"]
    names = [row.name for row in TRAINED]
    assert (sorted(hp["required"]), sorted(hp["properties"]), hp["additionalProperties"]) == (
        sorted(names),
        sorted(names),
        False,
    )
    assert {row.name: {"const": row.fixed["value"]} for row in TRAINED if row.fixed} == {
        name: rule for name, rule in hp["properties"].items() if "const" in rule
    }
