"""`models`' rows: what the cache and plain directories hold, read through the plan's own resolution."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mlx_agent.errors import InvalidArguments
from mlx_agent.load_memory import memory_estimate
from mlx_agent.plan.catalog import find_models, missing_files, model_dirs, quantization
from tests.conftest import assert_valid
from tests.fixtures.tiny_model import build_hf_cache_repo


@pytest.fixture
def hf_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the Hugging Face cache at an empty folder of the test's own."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf"


def test_a_complete_cached_repo_is_described_as_a_plan_would(hf_home: Path, tiny_model: Path) -> None:
    """A complete repo gets auto's runtime and kind, its size, window, agents record and the admission estimate."""
    build_hf_cache_repo(hf_home, "org/tiny", tiny_model)
    [row] = find_models([], free=10**12)
    weights = (tiny_model / "model.safetensors").stat().st_size
    assert (row["name"], row["complete"], row["runtime"], row["kind"]) == ("org/tiny", True, "mlx_lm", "text")
    assert row["size_bytes"] == sum(p.stat().st_size for p in tiny_model.iterdir() if p.is_file())
    assert row["context_window"] == json.loads((tiny_model / "config.json").read_text())["max_position_embeddings"]
    assert row["agents"] is not None and row["agents"]["chat_template"] is True
    memory = row["memory"]
    assert memory is not None and 0 < (memory["weight_bytes"] or 0) < weights  # tensor bytes, without the header
    assert (memory["estimate_bytes"], memory["fits"]) == (memory_estimate(memory["weight_bytes"]), True)
    assert_valid("models_listing", {"hf_cache": "", "dirs": [], "receipts_dir": "", "models": [row]})


def test_memory_that_does_not_cover_the_estimate_does_not_fit(hf_home: Path, tiny_model: Path) -> None:
    """With less free memory than the admission rule asks, the row says it does not fit; unknown memory is null."""
    build_hf_cache_repo(hf_home, "org/tiny", tiny_model)
    [short] = find_models([], free=1)
    [unknown] = find_models([], free=None)
    assert short["memory"] is not None and short["memory"]["fits"] is False
    assert unknown["memory"] is not None and unknown["memory"]["fits"] is None


def test_an_incomplete_snapshot_names_its_missing_files(hf_home: Path, tiny_model: Path) -> None:
    """A snapshot whose weights never arrived is incomplete, names model.safetensors, and has serve's refusal."""
    build_hf_cache_repo(hf_home, "org/partial", tiny_model, complete=False)
    [row] = find_models([], free=None)
    assert (row["complete"], row["missing"], row["runtime"]) == (False, ["model.safetensors"], None)
    assert row["problem"] is not None and row["problem"]["code"] == "model_not_local"
    assert row["context_window"] is not None  # config.json is there: what it says is still shown


def test_a_dangling_link_is_missing_without_a_tree_listing(hf_home: Path, tiny_model: Path) -> None:
    """A snapshot link to a deleted blob is named missing even where no tree listing was cached."""
    snapshot = build_hf_cache_repo(hf_home, "org/tiny", tiny_model, write_tree_cache=False)
    (snapshot / "tokenizer.json").resolve().unlink()
    assert missing_files(snapshot.parent.parent, snapshot.name, snapshot) == ["tokenizer.json"]
    [row] = find_models([], free=None)
    assert (row["complete"], row["missing"]) == (False, ["tokenizer.json"])


def test_directories_list_their_models_and_refuse_what_serve_would(
    hf_home: Path, tiny_model: Path, tmp_path: Path
) -> None:
    """--dir lists a model directory itself or those inside a folder; one without a tokenizer says model_invalid."""
    folder = tmp_path / "models"
    shutil.copytree(tiny_model, folder / "good")
    shutil.copytree(tiny_model, folder / "broken")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / "broken" / name).unlink()
    (folder / "notes").mkdir()  # no config.json: not a model, not listed
    assert model_dirs(folder) == [folder / "broken", folder / "good"]
    assert model_dirs(folder / "good") == [folder / "good"]
    rows = find_models([folder, folder / "good"], free=None)  # the same directory twice is one row
    assert [(r["name"], r["source"], r["complete"]) for r in rows] == [
        ("broken", "path", False),
        ("good", "path", True),
    ]
    assert rows[0]["problem"] is not None and rows[0]["problem"]["code"] == "model_invalid"


def test_a_dir_that_is_not_a_directory_is_refused(hf_home: Path, tmp_path: Path) -> None:
    """A --dir that does not exist is invalid_arguments, not an empty listing."""
    with pytest.raises(InvalidArguments, match="is not a directory"):
        find_models([tmp_path / "typo"], free=None)


def test_a_model_type_no_runtime_loads_says_why(hf_home: Path, tiny_model: Path, tmp_path: Path) -> None:
    """A complete model of an unknown model_type has no runtime, and the row carries auto's refusal."""
    odd = tmp_path / "odd"
    shutil.copytree(tiny_model, odd)
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "model_type": "no_such_family"}))
    [row] = find_models([odd], free=None)
    assert (row["complete"], row["runtime"], row["agents"]) == (True, None, None)
    assert row["runtime_problem"] is not None and row["runtime_problem"]["code"] == "unsupported_model"


@pytest.mark.fast
def test_quantization_is_read_from_config() -> None:
    """mlx_lm's quantization key gives bits and group size; a model without it is not quantized."""
    assert quantization({"quantization": {"bits": 4, "group_size": 64}}) == {"bits": 4, "group_size": 64}
    assert quantization({"quantization_config": {"bits": 8}}) == {"bits": 8, "group_size": None}
    assert quantization({"model_type": "llama"}) is None
