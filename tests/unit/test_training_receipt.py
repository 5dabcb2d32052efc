"""Training receipts as evidence (load and check), and progress read from a training log."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import AdapterChanged, PreviewStale
from mlx_agent.errors.commands import (
    BaseModelChanged,
    ReceiptCorrupt,
    ReceiptNotFound,
    ReceiptVersionUnsupported,
    TrainingIncomplete,
)
from mlx_agent.plan.source import resolve_path_source
from mlx_agent.plan.training_receipt import check_training_receipt, load_training_receipt
from mlx_agent.supervise.train_log import parse, read_progress
from tests.fixtures.tiny_model import build_hf_cache_repo

ESC = "\x1b"
MUTED, BOLD, END = f"{ESC}[38;5;244m", f"{ESC}[1m", f"{ESC}[0m"
# Lines as mlx_lm 0.32.2 writes them to a file (captured from a real run on the tiny model).
REAL_LOG = (
    "Training\n"
    "Trainable parameters: 5.869% (0.008M/0.140M)\n"
    f"  {BOLD}iter   train_loss     tok/s     tokens{END}\n"
    f"  {MUTED}   1{END}    {ESC}[1;35mval{END} {BOLD}6.406{END}    {MUTED}0.09s{END}\n"
    f"  {MUTED}   2{END}    {ESC}[1;32m6.360 ▼{END}    {BOLD}   32{END}    {MUTED}  0.1k{END}\n"
    f"  {MUTED}   3{END}    {ESC}[1;35mval{END} {BOLD}6.393{END}    {MUTED}0.05s{END}\n"
    f"  {MUTED}   4{END}    {ESC}[1;33m6.373 ▲{END}    {BOLD}1,368{END}    {MUTED}  0.3k{END}\n"
    f"{ESC}[1;34mtrain{END} {ESC}[34m████{END} {ESC}[1;34m 66%{END} {MUTED}·{END} {ESC}[1;34m    4{END}{MUTED}/6{END}\n"
)


@pytest.mark.fast
def test_log_parser_reads_real_mlx_lm_lines() -> None:
    """The last train and validation reports are found in mlx_lm's styled output."""
    assert parse(REAL_LOG) == {"train": {"iteration": 4, "loss": 6.373}, "val": {"iteration": 3, "loss": 6.393}}


@pytest.mark.fast
def test_log_parser_handles_nan_and_plain_lines() -> None:
    """A nan loss is a report too, and unstyled lines parse the same."""
    text = "   10      nan ▲    1,000    12.5k\n   10    val   nan    0.10s\nmlx-agent lora: trainer started\n"
    result = parse(text)
    train, val = result["train"], result["val"]
    assert train is not None and val is not None
    assert train["iteration"] == 10 and math.isnan(train["loss"])
    assert val["iteration"] == 10 and math.isnan(val["loss"])


@pytest.mark.fast
def test_progress_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    """No log yet means no reports, not an error."""
    assert read_progress(tmp_path / "none.log") == {"train": None, "val": None}


@pytest.mark.fast
def test_progress_reads_only_the_tail_of_a_long_log(tmp_path: Path) -> None:
    """A log longer than the tail window still reports its last lines."""
    log = tmp_path / "long.log"
    log.write_text("x" * 2_000_000 + "\n" + "  12    1.500 ▼    10    0.1k\n")
    assert read_progress(log)["train"] == {"iteration": 12, "loss": 1.5}


@pytest.fixture
def completed(model_copy: Path, tmp_path: Path) -> Any:
    """Return a completed receipt pinning the private model copy and an adapter directory of two files."""
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    files = {}
    for name, content in (("adapter_config.json", b'{"num_layers": 2}'), ("adapters.safetensors", b"\x00" * 64)):
        (adapter / name).write_bytes(content)
        files[name] = {"sha256": hashlib.sha256(content).hexdigest(), "size": len(content)}
    base = resolve_path_source(str(model_copy))[0]
    return {
        "format_version": "1.0",
        "kind": "train",
        "id": "0" * 16,
        "state": "completed",
        "exit_code": 0,
        "plan": {"base": base, "adapter_path": str(adapter)},
        "base": base,
        "adapter": {"path": str(adapter), "files": files},
    }


def write(path: Path, receipt: Any) -> Path:
    """Write a receipt file and return its path."""
    path.write_text(json.dumps(receipt))
    return path


def test_load_returns_receipt_and_the_sha256_of_its_bytes(completed: Any, tmp_path: Path) -> None:
    """The receipt comes back parsed, with the sha256 of the exact bytes read."""
    path = write(tmp_path / "r.json", completed)
    receipt, digest = load_training_receipt(str(path))
    assert receipt == completed and digest == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.fast
@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, ReceiptNotFound),
        ("{not json", ReceiptCorrupt),
        ('["a list"]', ReceiptCorrupt),
        ('{"format_version": "1.0", "kind": "serve", "state": "x", "plan": {}}', ReceiptCorrupt),
        ('{"format_version": "2.0", "kind": "train", "state": "completed", "plan": {}}', ReceiptVersionUnsupported),
    ],
    ids=["missing", "not_json", "not_object", "serve_receipt", "newer_major"],
)
def test_load_refusals(tmp_path: Path, content: str | None, error: type[Exception]) -> None:
    """Missing, corrupt, foreign and newer-major receipts are refused with their own codes."""
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(error):
        load_training_receipt(str(path))


def test_check_returns_base_and_adapter(completed: Any, tmp_path: Path) -> None:
    """A completed receipt over unchanged files yields the base identity, its config and the adapter files."""
    result = check_training_receipt(completed, tmp_path)
    assert result["base"] == completed["base"] and result["base_config"]["model_type"] == "llama"
    assert result["adapter"] == completed["adapter"]


@pytest.mark.parametrize("state", ["running", "failed"])
def test_check_refuses_an_incomplete_training(completed: Any, tmp_path: Path, state: str) -> None:
    """Only a completed training vouches for an adapter."""
    incomplete: Any = {**completed, "state": state}
    with pytest.raises(TrainingIncomplete) as info:
        check_training_receipt(incomplete, tmp_path)
    assert info.value.details["state"] == state


def test_check_refuses_a_changed_adapter_byte(completed: Any, tmp_path: Path) -> None:
    """One flipped byte of adapters.safetensors is adapter_changed, a kind of stale preview."""
    weights = Path(completed["adapter"]["path"]) / "adapters.safetensors"
    weights.write_bytes(b"\x01" + b"\x00" * 63)
    with pytest.raises(AdapterChanged) as info:
        check_training_receipt(completed, tmp_path)
    assert isinstance(info.value, PreviewStale)
    assert [c["field"] for c in info.value.details["changes"]] == ["adapters.safetensors.sha256"]


def test_check_refuses_a_missing_adapter_file(completed: Any, tmp_path: Path) -> None:
    """A deleted adapter file is adapter_changed too."""
    (Path(completed["adapter"]["path"]) / "adapter_config.json").unlink()
    with pytest.raises(AdapterChanged) as info:
        check_training_receipt(completed, tmp_path)
    assert [c["field"] for c in info.value.details["changes"]] == ["adapter_config.json"]
    assert info.value.details["changes"][0]["new"] == "<absent>"  # recorded, and now gone


def test_check_refuses_a_touched_base_weight(completed: Any, model_copy: Path, tmp_path: Path) -> None:
    """A base weight file with a new mtime is base_model_changed, with the field that changed."""
    weights = model_copy / "model.safetensors"
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(BaseModelChanged) as info:
        check_training_receipt(completed, tmp_path)
    assert [c["field"] for c in info.value.details["changes"]] == [
        "files[model.safetensors].ctime_ns",  # any change to a file's metadata moves its ctime too
        "files[model.safetensors].mtime_ns",
    ]


def test_an_older_receipt_without_ctime_still_checks(completed: Any, model_copy: Path, tmp_path: Path) -> None:
    """A receipt written before ctime_ns was bound pins its weights without it, and still checks as unchanged."""
    for record in completed["base"]["files"]:
        record.pop("ctime_ns", None)
    result = check_training_receipt(completed, tmp_path)
    assert result["base"]["path"] == str(model_copy) and result["adapter"] == completed["adapter"]


def test_check_refuses_a_base_that_is_gone(completed: Any, model_copy: Path, tmp_path: Path) -> None:
    """A base directory that no longer holds a model is base_model_changed, with the underlying cause."""
    (model_copy / "config.json").unlink()
    with pytest.raises(BaseModelChanged) as info:
        check_training_receipt(completed, tmp_path)
    assert info.value.details["cause"]["code"] == "config_missing"


def test_relative_paths_in_older_receipts_resolve_from_the_cwd(
    completed: Any, model_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative base and adapter paths resolve from the working directory and must still match by content."""
    older = copy.deepcopy(completed)
    older["base"]["path"] = os.path.relpath(model_copy, tmp_path)
    older["adapter"]["path"] = "adapter"
    monkeypatch.chdir(tmp_path)
    result = check_training_receipt(older, tmp_path)
    assert result["adapter"]["path"] == str(tmp_path / "adapter") and result["base"]["path"] == str(model_copy)
    monkeypatch.chdir(model_copy)  # from elsewhere the same relative paths name nothing
    with pytest.raises(BaseModelChanged):
        check_training_receipt(older, tmp_path)


def test_repo_base_is_rederived_from_the_cache(
    tiny_model: Path, tmp_path: Path, completed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A base from the HF cache is re-derived by repo; a moved refs/main is base_model_changed."""
    hf = tmp_path / "hf"
    build_hf_cache_repo(hf, "org/tiny", tiny_model)
    monkeypatch.setenv("HF_HOME", str(hf))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    from mlx_agent.plan.source import resolve_repo_source

    base = resolve_repo_source("org/tiny")[0]
    receipt: Any = {**completed, "base": base}
    assert check_training_receipt(receipt, tmp_path)["base"] == base
    build_hf_cache_repo(hf, "org/tiny", tiny_model, revision="f" * 40)
    with pytest.raises(BaseModelChanged) as info:
        check_training_receipt(receipt, tmp_path)
    changes = {c["field"]: c for c in info.value.details["changes"]}
    assert sorted(changes) == ["path", "revision"]  # a new revision is a new snapshot directory
    assert (changes["revision"]["old"], changes["revision"]["new"]) == (base["revision"], "f" * 40)


@pytest.mark.fast
def test_the_training_receipt_record_has_the_keys_of_its_schema() -> None:
    """records.TrainingReceipt, which readers are typed by, names what the hand-written schema names and requires."""
    from pydantic import TypeAdapter

    from mlx_agent.records.training import TrainedProcess, TrainingReceipt

    schema = json.loads((Path(__file__).parents[2] / "schemas" / "training_receipt.json").read_text())
    record = TypeAdapter(TrainingReceipt).json_schema()
    assert (set(record["properties"]), set(record["required"])) == (set(schema["properties"]), set(schema["required"]))
    process = TypeAdapter(TrainedProcess).json_schema()
    watcher = schema["properties"]["watcher"]
    assert (set(process["properties"]), set(process["required"])) == (
        set(watcher["properties"]),
        set(watcher["required"]),
    )
