"""The shipped recipes: each is a valid ``records.Recipe`` and ``schemas/recipe.json``, spelled as the plan spells it.

The worker's entry table (``runtime.entry.ENTRIES``) names exactly the runtimes whose recipe has a wrapper.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import TypeAdapter, ValidationError

from mlx_agent import wire
from mlx_agent.plan.recipes import load_recipe, recipe_names
from mlx_agent.records.plan import Recipe
from mlx_agent.resources import recipes_dir, schemas_dir
from mlx_agent.runtime import entry

pytestmark = pytest.mark.fast

RECIPES = sorted(recipes_dir().glob("*.json"))


def schema_validator() -> Draft202012Validator:
    """Return a validator of the shipped recipe schema."""
    return Draft202012Validator(json.loads((schemas_dir() / "recipe.json").read_text()))


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: Path(p).stem)
def test_every_shipped_recipe_is_a_recipe(path: Path) -> None:
    """Each recipe file passes the typed record (strict) and the generated schema, and names itself by its file."""
    doc = json.loads(path.read_text())
    recipe = TypeAdapter(Recipe).validate_python(doc)
    assert [e.message for e in schema_validator().iter_errors(doc)] == []
    assert recipe["name"] == path.stem
    assert recipe["format_version"].split(".")[0] == wire.RECIPE_VERSION.split(".")[0]


def test_the_plan_reads_the_names_the_files_spell() -> None:
    """The runtime names are the plan's values: ``mlx_lm``, ``mlx-vlm`` and its kinds', from the file stems."""
    assert recipe_names() == [
        "mlx-vlm",
        "mlx-vlm-embed",
        "mlx-vlm-image",
        "mlx-vlm-speech",
        "mlx-vlm-transcription",
        "mlx_lm",
    ]
    assert [load_recipe(name)[0]["name"] for name in recipe_names()] == recipe_names()


def test_the_entry_table_names_the_wrapped_recipes() -> None:
    """``ENTRIES`` has one row per recipe with a wrapper, and that wrapper is the module the plan runs."""
    wrapped = {name: load_recipe(name)[0] for name in recipe_names() if "wrapper" in load_recipe(name)[0]}
    assert sorted(entry.ENTRIES) == sorted(wrapped)
    assert {recipe["wrapper"] for recipe in wrapped.values()} == {wire.ENTRY_MODULE}
    for name in entry.ENTRIES:
        assert callable(entry.load_entry(name))


def test_a_template_switched_thinking_uses_the_template_flag() -> None:
    """Where thinking is a chat-template argument, its flag is the recipe's chat-template-arguments flag."""
    for name in recipe_names():
        capabilities = load_recipe(name)[0]["capabilities"]
        thinking = capabilities["thinking"]
        if thinking is not None and thinking["kind"] == "chat_template_args":
            assert thinking["flag"] == capabilities["chat_template_args"]


def altered(change: str) -> dict[str, Any]:
    """Return the mlx_lm recipe with one named change."""
    doc: dict[str, Any] = copy.deepcopy(json.loads((recipes_dir() / "mlx_lm.json").read_text()))
    if change == "unknown_key":
        doc["entry"] = "mlx_agent.runtime.entries.mlx_lm_entry:main"
    elif change == "missing_capability":
        del doc["capabilities"]["jit"]
    elif change == "unknown_kernel":
        doc["capabilities"]["kernels"] = ["prompt_lookup", "flash"]
    elif change == "port_out_of_range":
        doc["default_port"] = 70000
    elif change == "thinking_without_kind":
        doc["capabilities"]["thinking"] = {"flag": "--chat-template-args", "key": "enable_thinking"}
    return doc


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ("unknown_key", ["entry"]),
        ("missing_capability", ["capabilities", "jit"]),
        ("unknown_kernel", ["capabilities", "kernels", 1]),
        ("port_out_of_range", ["default_port"]),
        ("thinking_without_kind", ["capabilities", "thinking"]),
    ],
)
def test_a_bad_recipe_is_refused_by_the_record_and_the_schema(change: str, where: list[Any]) -> None:
    """A recipe with one bad field fails both checks, and the record names the field."""
    doc = altered(change)
    with pytest.raises(ValidationError) as info:
        TypeAdapter(Recipe).validate_python(doc)
    assert any(list(error["loc"][: len(where)]) == where for error in info.value.errors())
    assert list(schema_validator().iter_errors(doc)) != []


def test_an_unknown_runtime_gets_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m mlx_agent.runtime`` with a name the table lacks exits 2 and lists the table's names."""
    assert entry.main(["llama.cpp", "--model", "m"]) == 2
    assert entry.main([]) == 2
    lines = capsys.readouterr().err.splitlines()
    names = "{mlx_lm|mlx-vlm|mlx-vlm-embed|mlx-vlm-speech|mlx-vlm-transcription|mlx-vlm-image}"
    assert lines == [entry.USAGE, entry.USAGE] and names in entry.USAGE


started: list[list[str]] = []


def record_start(argv: list[str]) -> int:
    """Stand in for a runtime's start function: remember the arguments, exit 7."""
    started.append(argv)
    return 7


def test_the_entry_runs_the_function_its_table_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` imports the ``module:function`` the table gives the runtime and hands it the rest of argv."""
    monkeypatch.setitem(entry.ENTRIES, "mlx-vlm", f"{__name__}:record_start")
    started.clear()
    assert entry.main(["mlx-vlm", "--model", "m"]) == 7
    assert started == [["--model", "m"]]
