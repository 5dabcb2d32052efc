"""The lora train plan: deterministic, binding base, dataset and every hyperparameter, refusing early."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.canonical import canonical_json, plan_diff, with_hash
from mlx_agent.errors import InvalidArguments, MlxAgentError
from mlx_agent.errors.commands import AdapterPathNotEmpty, DatasetInvalid, DatasetNotFound
from mlx_agent.plan.requests import TrainRequest
from mlx_agent.plan.source import resolve_path_source
from mlx_agent.plan.training import build_training_plan
from tests.conftest import assert_valid
from tests.fixtures.tiny_dataset import write_dataset
from tests.fixtures.tiny_model import build_hf_cache_repo

CUSTOM: dict[str, Any] = {
    "iters": 7,
    "batch_size": 3,
    "learning_rate": 3e-4,
    "num_layers": 1,
    "rank": 4,
    "scale": 10.5,
    "dropout": 0.05,
    "fine_tune_type": "dora",
    "max_seq_length": 512,
    "seed": 11,
    "steps_per_report": 2,
    "steps_per_eval": 5,
    "val_batches": 2,
    "save_every": 3,
}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """Return a small dataset directory with train.jsonl and valid.jsonl."""
    return write_dataset(tmp_path / "data")


def request(model: Path, data: Path, tmp_path: Path, **overrides: Any) -> TrainRequest:
    """Return a request for the tiny model with two layers adapted and receipts under tmp_path."""
    fields: dict[str, Any] = {
        "path": str(model),
        "data": str(data),
        "adapter_path": str(tmp_path / "adapter"),
        "num_layers": 2,
        "receipts_dir": str(tmp_path / "receipts"),
        **overrides,
    }
    return TrainRequest(**fields)


def plan_of(req: TrainRequest) -> dict[str, Any]:
    """Return the plan with its hash."""
    return with_hash(build_training_plan(req))


def test_plan_is_deterministic_and_valid(tiny_model: Path, data: Path, tmp_path: Path) -> None:
    """Two builds of one request give byte-identical canonical plans that match the schema."""
    first, second = plan_of(request(tiny_model, data, tmp_path)), plan_of(request(tiny_model, data, tmp_path))
    assert canonical_json(first) == canonical_json(second)
    assert_valid("training_plan", first)
    assert first["operation"] == "lora.train" and first["cwd"] == "/"
    assert not {"pid", "started_at", "created_at"} & set(first)


def test_plan_binds_base_identity_and_dataset_sha256(tiny_model: Path, data: Path, tmp_path: Path) -> None:
    """The base record is the serve identity of the model and each dataset file carries its sha256 and size."""
    plan = plan_of(request(tiny_model, data, tmp_path))
    assert plan["base"] == resolve_path_source(str(tiny_model))[0]
    files = {f["name"]: f for f in plan["dataset"]["files"]}
    assert set(files) == {"train.jsonl", "valid.jsonl"}
    for name, record in files.items():
        raw = (data / name).read_bytes()
        assert record["sha256"] == hashlib.sha256(raw).hexdigest() and record["size"] == len(raw)
    assert files["train.jsonl"]["lines"] == 8 and plan["dataset"]["formats"] == {
        "train.jsonl": "text",
        "valid.jsonl": "text",
    }


def test_every_jsonl_file_is_bound(tiny_model: Path, tmp_path: Path) -> None:
    """A test.jsonl beside the splits is hashed too, and a changed byte in it changes the hash."""
    data = write_dataset(tmp_path / "data", extra={"test.jsonl": '{"text": "x"}\n', "notes.txt": "ignored"})
    before = plan_of(request(tiny_model, data, tmp_path))
    assert [f["name"] for f in before["dataset"]["files"]] == ["test.jsonl", "train.jsonl", "valid.jsonl"]
    (data / "test.jsonl").write_text('{"text": "y"}\n')
    after = plan_of(request(tiny_model, data, tmp_path))
    assert [c["field"] for c in plan_diff(before, after)] == ["dataset.files[test.jsonl].sha256"]


def test_one_changed_dataset_byte_changes_the_hash(tiny_model: Path, data: Path, tmp_path: Path) -> None:
    """Flipping one byte of train.jsonl changes the plan hash, and the diff names that file's sha256."""
    before = plan_of(request(tiny_model, data, tmp_path))
    raw = bytearray((data / "train.jsonl").read_bytes())
    raw[12] = ord("X") if raw[12] != ord("X") else ord("Y")
    (data / "train.jsonl").write_bytes(bytes(raw))
    after = plan_of(request(tiny_model, data, tmp_path))
    assert before["preview_hash"] != after["preview_hash"]
    assert [c["field"] for c in plan_diff(before, after)] == ["dataset.files[train.jsonl].sha256"]


@pytest.mark.parametrize("field", sorted(CUSTOM))
def test_each_hyperparameter_changes_the_hash(tiny_model: Path, tmp_path: Path, field: str) -> None:
    """Changing any single hyperparameter changes the plan hash."""
    data = write_dataset(tmp_path / "data", train=8, valid=8)
    base = plan_of(request(tiny_model, data, tmp_path, batch_size=3))
    changed = plan_of(request(tiny_model, data, tmp_path, **{"batch_size": 3, field: CUSTOM[field]}))
    if field == "batch_size":
        changed = plan_of(request(tiny_model, data, tmp_path, batch_size=2))
    assert base["preview_hash"] != changed["preview_hash"]


def test_mlx_lm_reads_every_hyperparameter_from_argv_or_config(tiny_model: Path, tmp_path: Path) -> None:
    """mlx_lm's own parser and config merge give every hyperparameter its planned value, none from its defaults."""
    import importlib

    # Both ship without type information; the test only needs their behaviour.
    yaml: Any = importlib.import_module("yaml")
    lora: Any = importlib.import_module("mlx_lm.lora")
    data = write_dataset(tmp_path / "data", train=8, valid=8)
    plan = plan_of(request(tiny_model, data, tmp_path, mask_prompt=False, **CUSTOM))
    assert plan["argv"][1:4] == ["-m", "mlx_lm", "lora"]
    args: dict[str, Any] = dict(vars(lora.build_parser().parse_args(plan["argv"][4:])))
    # Confirm writes the config with write_json_atomic (indented JSON); mlx_lm reads it as YAML.
    config = yaml.load(json.dumps(plan["config"], indent=2, sort_keys=True), lora.yaml_loader)
    assert config == plan["config"]
    for key, value in config.items():
        if args.get(key) is None:
            args[key] = value
    left_to_defaults = {k for k in lora.CONFIG_DEFAULTS if args.get(k) is None}
    # Only keys whose default is "nothing", or that matter only with --test (which the plan turns off).
    assert all(lora.CONFIG_DEFAULTS[k] is None or k == "test_batches" for k in left_to_defaults), left_to_defaults
    hp = plan["hyperparameters"]
    assert args["lora_parameters"] == {"rank": hp["rank"], "scale": hp["scale"], "dropout": hp["dropout"]}
    for key in (
        "fine_tune_type",
        "iters",
        "batch_size",
        "learning_rate",
        "num_layers",
        "max_seq_length",
        "seed",
        "steps_per_report",
        "steps_per_eval",
        "val_batches",
        "save_every",
        "mask_prompt",
        "optimizer",
        "grad_accumulation_steps",
        "grad_checkpoint",
        "lr_schedule",
    ):
        assert args[key] == hp[key], key
    for key, value in CUSTOM.items():
        assert hp[key] == value, key
    assert args["train"] is True and args["test"] is False and args["model"] == str(tiny_model)
    assert args["data"] == str(data) and args["adapter_path"] == str(tmp_path / "adapter")
    assert args["config"] == plan["config_path"] and args["trust_remote_code"] is False


def test_mask_prompt_goes_to_the_config(tiny_model: Path, tmp_path: Path) -> None:
    """--mask-prompt is set through the config file, where false can be said too."""
    chat = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.jsonl", "valid.jsonl"):
        (data / name).write_text((chat + "\n") * 4)
    plan = plan_of(request(tiny_model, data, tmp_path, mask_prompt=True))
    assert plan["config"]["mask_prompt"] is True and "--mask-prompt" not in plan["argv"]
    assert plan["dataset"]["formats"]["train.jsonl"] == "chat"


def test_paths_are_absolute_and_env_is_offline(
    tiny_model: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative --data and --adapter-path become absolute, and the children run offline from /."""
    monkeypatch.chdir(tmp_path)
    plan = plan_of(
        TrainRequest(path=str(tiny_model), data="data", adapter_path="out", num_layers=2, receipts_dir="receipts")
    )
    assert plan["dataset"]["path"] == str(data) and plan["adapter_path"] == str(tmp_path / "out")
    assert plan["config_path"].startswith(str(tmp_path / "receipts" / "train") + os.sep)
    assert plan["env"]["HF_HUB_OFFLINE"] == "1" and plan["env"]["TRANSFORMERS_OFFLINE"] == "1"
    assert set(plan["trainer"]["versions"]) == {"mlx", "mlx-lm", "mlx-agent"}


def test_repo_base_binds_the_cached_snapshot(
    tiny_model: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--repo trains on the cached snapshot, bound by revision and blob ids."""
    snapshot = build_hf_cache_repo(tmp_path / "hf", "org/tiny", tiny_model)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    plan = plan_of(request(tiny_model, data, tmp_path, path=None, repo="org/tiny"))
    assert plan["base"]["kind"] == "hf_cache" and plan["base"]["path"] == str(snapshot)
    assert plan["argv"][plan["argv"].index("--model") + 1] == str(snapshot)
    assert any("blob" in f for f in plan["base"]["files"])


def test_empty_adapter_directory_is_accepted(tiny_model: Path, data: Path, tmp_path: Path) -> None:
    """An existing empty adapter directory is as good as an absent one."""
    (tmp_path / "adapter").mkdir()
    assert plan_of(request(tiny_model, data, tmp_path))["adapter_path"] == str(tmp_path / "adapter")


def test_val_batches_zero_needs_no_valid_file(tiny_model: Path, tmp_path: Path) -> None:
    """Without validation, valid.jsonl may be absent."""
    data = write_dataset(tmp_path / "data", valid=0)
    plan = plan_of(request(tiny_model, data, tmp_path, val_batches=0))
    assert [f["name"] for f in plan["dataset"]["files"]] == ["train.jsonl"]


def test_line_count_matches_what_mlx_lm_reads(tiny_model: Path, tmp_path: Path) -> None:
    """A last line without a newline still counts as a record."""
    data = write_dataset(tmp_path / "data", train=0)
    (data / "train.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n{"text": "c"}\n{"text": "d"}')
    plan = plan_of(request(tiny_model, data, tmp_path))
    assert {f["name"]: f["lines"] for f in plan["dataset"]["files"]}["train.jsonl"] == 4


REFUSALS: list[tuple[str, dict[str, Any], type[MlxAgentError]]] = [
    ("no_path_nor_repo", {"path": None}, InvalidArguments),
    ("zero_layers", {"num_layers": 0}, InvalidArguments),
    ("more_layers_than_the_model", {"num_layers": 3}, InvalidArguments),
    ("dropout_one", {"dropout": 1.0}, InvalidArguments),
    ("negative_learning_rate", {"learning_rate": -1.0}, InvalidArguments),
    ("lora_or_dora_only", {"fine_tune_type": "full"}, InvalidArguments),
    ("batch_larger_than_train", {"batch_size": 9}, DatasetInvalid),
    ("mask_prompt_on_text", {"mask_prompt": True}, DatasetInvalid),
]


@pytest.mark.parametrize(("name", "overrides", "error"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_request_refusals(
    tiny_model: Path, data: Path, tmp_path: Path, name: str, overrides: dict[str, Any], error: type[MlxAgentError]
) -> None:
    """Requests mlx_lm would fail on, or misread, are refused before anything runs."""
    with pytest.raises(error):
        build_training_plan(request(tiny_model, data, tmp_path, **overrides))


def test_missing_dataset_directory_is_not_found(tiny_model: Path, tmp_path: Path) -> None:
    """A --data that does not exist is refused (mlx_lm would try to download a dataset by that name)."""
    with pytest.raises(DatasetNotFound):
        build_training_plan(request(tiny_model, tmp_path / "nope", tmp_path))


@pytest.mark.parametrize("layout", ["no_train", "no_valid", "bad_first_line", "unknown_keys", "valid_too_small"])
def test_dataset_refusals(tiny_model: Path, tmp_path: Path, layout: str) -> None:
    """A dataset without train.jsonl, without valid.jsonl when validating, or with unusable records is refused."""
    data = write_dataset(
        tmp_path / "data",
        train=0 if layout == "no_train" else 8,
        valid={"no_valid": 0, "valid_too_small": 2}.get(layout, 4),
    )
    if layout == "bad_first_line":
        (data / "train.jsonl").write_text("not json\n" * 8)
    if layout == "unknown_keys":
        (data / "train.jsonl").write_text('{"body": "x"}\n' * 8)
    with pytest.raises(DatasetInvalid):
        build_training_plan(request(tiny_model, data, tmp_path))


def test_non_empty_adapter_directory_is_refused(tiny_model: Path, data: Path, tmp_path: Path) -> None:
    """An adapter directory with anything in it, or a file at that path, is never written into."""
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapters.safetensors").write_bytes(b"old")
    with pytest.raises(AdapterPathNotEmpty) as info:
        build_training_plan(request(tiny_model, data, tmp_path))
    assert info.value.details["entries"] == ["adapters.safetensors"]
    with pytest.raises(AdapterPathNotEmpty):
        build_training_plan(request(tiny_model, data, tmp_path, adapter_path=str(data / "train.jsonl")))


def test_adapter_inside_the_base_is_refused(tiny_model: Path, data: Path, tmp_path: Path) -> None:
    """Writing the adapter into the base model directory would change the identity the receipt pins."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    with pytest.raises(InvalidArguments):
        build_training_plan(request(model, data, tmp_path, adapter_path=str(model / "adapter")))


@pytest.mark.fast
def test_the_table_holds_every_training_option_once() -> None:
    """TRAINED names each request option that is not an input exactly once, and says where mlx_lm reads it."""
    from mlx_agent.plan.training import INPUTS, TRAINED

    names = [row.name for row in TRAINED]
    assert len(names) == len(set(names))
    assert {row.name for row in TRAINED if not row.fixed} == {o.dest for o in TrainRequest.OPTIONS} - set(INPUTS)
    assert all((row.flag is None) != (not row.config) for row in TRAINED)  # a flag or a config key, not both


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"iters": 0}, "--iters must be at least 1"),
        ({"val_batches": -2}, "--val-batches must be at least -1"),
        ({"num_layers": -2}, "--num-layers must be at least -1"),
        ({"learning_rate": 0.0}, "--learning-rate must be positive"),
        ({"dropout": 1.5}, "--dropout must be at most 1"),
        ({"dropout": 1.0}, "--dropout must be in [0, 1)"),
        ({"fine_tune_type": "full"}, "--fine-tune-type must be one of lora, dora"),
        ({"num_layers": 0}, "--num-layers must be at least 1, or -1 for every layer"),
    ],
)
def test_bounds_declared_on_the_options_refuse_library_callers(
    tiny_model: Path, data: Path, tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    """A request built in code gets the same bounds the command line enforces, each refusal naming its flag."""
    with pytest.raises(InvalidArguments) as refused:
        build_training_plan(request(tiny_model, data, tmp_path, **overrides))
    assert refused.value.message == message
