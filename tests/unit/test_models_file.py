"""Models files: one reviewed plan for a fleet, refusals that name the line and key, names that cannot collide."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.canonical import plan_diff, with_hash
from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import ModelsFileInvalid, ModelsNameConflict
from mlx_agent.plan.models_file import older_spellings
from mlx_agent.plan.requests import ServeRequest
from mlx_agent.plan.serve_plan import build_serve_plan
from mlx_agent.records.plan import ServePlan
from mlx_agent.supervise.previews import name_models
from tests.conftest import assert_valid

TWO = """\
[[model]]
served_model_name = "main"
path = "a"
alias = ["claude-sonnet-*", "claude-opus-*"]

[[model]]
served_model_name = "small"
path = "b"
alias = ["claude-haiku-*"]
max_tokens = 64
"""


@pytest.fixture
def fleet_dir(tiny_model: Path, tmp_path: Path) -> Path:
    """Return a directory holding two copies of the tiny model (``a`` and ``b``) for relative paths."""
    for name in ("a", "b"):
        shutil.copytree(tiny_model, tmp_path / name)
    return tmp_path


def plan_of(directory: Path, text: str, **kw: Any) -> ServePlan:
    """Write ``text`` as the models file of ``directory`` and return the hashed plan built from it."""
    path = directory / "models.toml"
    path.write_text(text)
    return with_hash(build_serve_plan(ServeRequest(models=str(path), port=18998, **kw)))


def refusal(directory: Path, text: str, **kw: Any) -> Any:
    """Return the error a models file is refused with."""
    with pytest.raises((ModelsFileInvalid, ModelsNameConflict, InvalidArguments)) as caught:
        plan_of(directory, text, **kw)
    return caught.value


def test_a_fleet_is_one_plan_binding_the_file_and_every_model(fleet_dir: Path) -> None:
    """Two tables give two models with their names, aliases, limits and logs, the file bound by its bytes."""
    plan = plan_of(fleet_dir, TWO, jit=True, max_loaded=1)
    assert_valid("serve_plan", plan)
    main, small = plan["models"]
    assert (main["served_model_name"], main["alias"], main["source"]["path"]) == (
        "main",
        ["claude-sonnet-*", "claude-opus-*"],
        str(fleet_dir / "a"),
    )
    assert (small["served_model_name"], small["max_tokens"], small["source"]["path"]) == (
        "small",
        64,
        str(fleet_dir / "b"),
    )
    assert main["worker"]["log_path"] != small["worker"]["log_path"]
    assert plan["models_file"]["path"] == str(fleet_dir / "models.toml") and plan["models_file"]["size"] == len(TWO)
    assert plan["front"]["max_loaded"] == 1 and plan["front"]["mode"] == "jit"
    assert [m["policy"] for m in plan["models"]] == [{"idle_timeout": 0, "keep_loaded": False, "preload": False}] * 2
    assert plan_of(fleet_dir, TWO, jit=True, max_loaded=1)["preview_hash"] == plan["preview_hash"]


def test_an_eager_fleet_loads_every_model_and_waits_for_each(fleet_dir: Path) -> None:
    """Without --jit every model is preloaded and kept, and the front's ready timeout covers each load."""
    plan = plan_of(fleet_dir, TWO, ready_timeout=30)
    assert [m["policy"] for m in plan["models"]] == [{"idle_timeout": 0, "keep_loaded": True, "preload": True}] * 2
    assert plan["ready_timeout"] == 60 and plan["models"][0]["worker"]["ready_timeout"] == 30


def test_a_change_to_the_file_is_named_by_model(fleet_dir: Path) -> None:
    """Editing one table changes the file's hash and that model's fields; the change list names the model."""
    before = plan_of(fleet_dir, TWO, jit=True)
    after = plan_of(fleet_dir, TWO.replace("max_tokens = 64", "max_tokens = 65"), jit=True)
    changes = plan_diff(before, after)
    assert name_models(changes) == ["small"]
    fields = {c["field"]: c.get("model") for c in changes}
    assert fields["models_file.sha256"] is None and fields["models[small].max_tokens"] == "small"


def test_table_policies_override_the_mode(fleet_dir: Path) -> None:
    """With --jit a table may preload, keep loaded or set its idle timeout; the others keep the JIT defaults."""
    text = TWO.replace('alias = ["claude-haiku-*"]', 'alias = ["claude-haiku-*"]\npreload = true\nidle_timeout = 60')
    plan = plan_of(fleet_dir, text, jit=True)
    assert plan["models"][1]["policy"] == {"idle_timeout": 60, "keep_loaded": False, "preload": True}
    assert plan["models"][0]["policy"]["preload"] is False


@pytest.mark.parametrize(
    "text,line,key",
    [
        (TWO.replace("max_tokens = 64", "max_tokens = 'lots'"), 10, "max_tokens"),
        (TWO.replace("max_tokens = 64", "max_tokens = 0"), 10, "max_tokens"),
        (TWO.replace("max_tokens = 64", "temperature = 0.5"), 10, "temperature"),
        (TWO.replace('served_model_name = "small"', ""), 6, "served_model_name"),
        (TWO.replace("max_tokens = 64", "kv_bits = 7"), 10, "kv_bits"),
        (TWO.replace("max_tokens = 64", 'hosts = "10.0.0.1,10.0.0.2"'), 10, "hosts"),
        (TWO.replace("max_tokens = 64", 'chat_template_args = "{}"'), 10, "chat_template_args"),
        (TWO.replace("max_tokens = 64", "prompt_cache_disk_gb = 1"), 10, "prompt_cache_disk_gb"),
        (TWO.replace("max_tokens = 64", "backend = 'mpi'"), 10, "backend"),
        (TWO.replace('path = "b"', 'path = "b"\nthinking = "maybe"'), 9, "thinking"),
        (TWO.replace("max_tokens = 64", "max_tokens = "), 10, None),
        ("[server]\nport = 1\n", 1, "server"),
        ("", None, "model"),
    ],
)
def test_bad_content_names_the_line_and_key(fleet_dir: Path, text: str, line: int | None, key: str | None) -> None:
    """A wrong type, value, unknown key, missing name or broken TOML is models_file_invalid at its line and key."""
    error = refusal(fleet_dir, text, jit=True)
    assert isinstance(error, ModelsFileInvalid), error
    assert error.exit_code == 2
    assert (error.details["line"], error.details["key"]) == (line, key)
    if line is not None:
        assert f"models.toml:{line}:" in error.message


def test_a_table_without_exactly_one_source_is_refused(fleet_dir: Path) -> None:
    """A table with no path, repo or training receipt is refused as serve start's options are."""
    error = refusal(fleet_dir, TWO.replace('path = "b"\n', ""), jit=True)
    assert isinstance(error, InvalidArguments) and "--path or --repo" in error.message


@pytest.mark.parametrize(
    "text,name",
    [
        (TWO.replace('served_model_name = "small"', 'served_model_name = "main"'), "main"),
        (TWO.replace('alias = ["claude-haiku-*"]', 'alias = ["main"]'), "main"),
        (TWO.replace('alias = ["claude-haiku-*"]', 'alias = ["claude-opus-*"]'), "claude-opus-*"),
        (TWO.replace('alias = ["claude-haiku-*"]', 'alias = ["ma*"]'), "ma*"),
    ],
)
def test_names_and_aliases_must_not_collide(fleet_dir: Path, text: str, name: str) -> None:
    """A repeated name or alias, or an alias that matches another model's name, is models_name_conflict."""
    error = refusal(fleet_dir, text, jit=True)
    assert isinstance(error, ModelsNameConflict), error
    assert error.details["name"] == name and error.details["model_index"] == 1


def test_an_eager_fleet_refuses_a_table_that_asks_to_unload(fleet_dir: Path) -> None:
    """A table asking for preload = false (or an idle timeout) without --jit is refused at its line."""
    error = refusal(fleet_dir, TWO.replace("max_tokens = 64", "preload = false"))
    assert isinstance(error, ModelsFileInvalid)
    assert (error.details["line"], error.details["key"], error.details["model"]) == (10, "preload", "small")
    assert "--jit" in error.message


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"path": "/x", "jit": True}, "--path"),
        ({"max_tokens": 99, "jit": True}, "--max-tokens"),
        ({"alias": ("x",), "jit": True}, "--alias"),
        ({"max_loaded": 1}, "--max-loaded 1"),
    ],
)
def test_single_model_options_and_too_few_slots_are_refused(fleet_dir: Path, kw: dict[str, Any], needle: str) -> None:
    """Model options belong in the tables; --max-loaded below the models an eager front loads is refused."""
    error = refusal(fleet_dir, TWO, **kw)
    assert isinstance(error, InvalidArguments) and needle in error.message


def test_the_older_keys_name_and_aliases_are_still_read(fleet_dir: Path) -> None:
    """A file written with name and aliases plans exactly as one with served_model_name and alias."""
    older = TWO.replace("served_model_name =", "name =").replace("alias =", "aliases =")
    assert plan_of(fleet_dir, older, jit=True)["models"] == plan_of(fleet_dir, TWO, jit=True)["models"]
    error = refusal(fleet_dir, older.replace('aliases = ["claude-haiku-*"]', 'aliases = ["main"]'), jit=True)
    assert isinstance(error, ModelsNameConflict)
    assert (error.details["key"], error.details["line"]) == ("aliases", 9)
    error = refusal(fleet_dir, older.replace('name = "small"', 'name = "small"\nserved_model_name = "s"'), jit=True)
    assert isinstance(error, ModelsFileInvalid) and error.details["key"] == "name"


def test_the_older_keys_are_named_in_one_warning_each(fleet_dir: Path) -> None:
    """A preview of a file with name and aliases warns once per older key, at its line; the flags' names warn none."""
    path = fleet_dir / "models.toml"
    path.write_text(TWO.replace("served_model_name =", "name =").replace("alias =", "aliases ="))
    assert older_spellings(str(path)) == [
        f"{path}:{line}: '{old}' is the older spelling of '{new}'; it is still read, "
        f"but rename it to match the --{flag} flag"
        for line, old, new, flag in [
            (4, "aliases", "alias", "alias"),
            (2, "name", "served_model_name", "served-model-name"),
            (9, "aliases", "alias", "alias"),
            (7, "name", "served_model_name", "served-model-name"),
        ]
    ]
    path.write_text(TWO)
    assert older_spellings(str(path)) == []


def test_relative_paths_are_read_from_the_files_directory(fleet_dir: Path) -> None:
    """A table's path, adapter, draft model and hostfile given relative to the file resolve beside it."""
    from tests.adapter_support import make_adapter

    make_adapter(fleet_dir / "adapter")
    text = TWO.replace("max_tokens = 64", 'adapter_path = "adapter"\ndraft_model = "a"')
    small = plan_of(fleet_dir, text, jit=True)["models"][1]
    assert small["adapter"] is not None and small["adapter"]["path"] == str(fleet_dir / "adapter")
    assert small["draft"] is not None and small["draft"]["source"]["path"] == str(fleet_dir / "a")
    (fleet_dir / "hosts.json").write_text('[{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}, {"ssh": "127.0.0.1"}]')
    error = refusal(fleet_dir, TWO.replace("max_tokens = 64", 'hostfile = "hosts.json"'), jit=True)
    assert isinstance(error, InvalidArguments) and "every host's IPs" in error.message


def test_a_table_without_max_tokens_sets_no_default_limit(fleet_dir: Path) -> None:
    """A table that gives no max_tokens plans none (null), as the command line without --max-tokens does."""
    main, small = plan_of(fleet_dir, TWO, jit=True)["models"]
    assert (main["max_tokens"], small["max_tokens"]) == (None, 64)
    argv = main["worker"]["argv"]
    assert argv[argv.index("--max-tokens") + 1] == str(main["context_window"])


def test_each_group_of_a_fleet_has_its_own_host_list(fleet_dir: Path) -> None:
    """Two groups on one port get two host lists, each beside the receipt and named by its model's place."""
    text = TWO.replace("max_tokens = 64", 'hosts = ["127.0.0.1", "127.0.0.1"]').replace(
        'path = "a"', 'path = "a"\nhosts = ["127.0.0.1", "127.0.0.1"]'
    )
    plan = plan_of(fleet_dir, text, jit=True, receipts_dir=str(fleet_dir / "receipts"))
    paths = [m["group"]["hostfile_path"] for m in plan["models"] if m["group"] is not None]
    serve_dir = fleet_dir / "receipts" / "serve"
    assert paths == [str(serve_dir / "18998.worker.hosts.json"), str(serve_dir / "18998.worker-1.hosts.json")]
