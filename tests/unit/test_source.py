"""Resolving --path and --repo to local files, and refusing anything not fully local."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mlx_agent.errors import InvalidArguments, ModelInvalid
from mlx_agent.errors.commands import ConfigMissing, ConfigNotObject, ConfigUnparsable, ModelNotLocal
from mlx_agent.plan.source import hf_hub_cache, resolve_path_source, resolve_repo_source
from tests.fixtures.tiny_model import build_hf_cache_repo


def test_path_source_is_resolved_and_bound(tiny_model: Path, tmp_path: Path) -> None:
    """A symlinked model path resolves to the real directory, and every file is bound."""
    link = tmp_path / "link"
    link.symlink_to(tiny_model)
    source, config = resolve_path_source(str(link))
    assert config["model_type"] == "llama"
    assert source["path"] == str(tiny_model.resolve())
    assert source["model_type"] == "llama"
    assert {f["name"] for f in source["files"]} >= {"config.json", "model.safetensors", "tokenizer.json"}


@pytest.mark.fast
def test_nonexistent_path_is_model_not_local(tmp_path: Path) -> None:
    """A path that does not exist is model_not_local."""
    with pytest.raises(ModelNotLocal):
        resolve_path_source(str(tmp_path / "nope"))


@pytest.mark.fast
def test_directory_without_config_is_config_missing(tmp_path: Path) -> None:
    """A directory without config.json is not a model: config_missing."""
    with pytest.raises(ConfigMissing, match=r"no config\.json"):
        resolve_path_source(str(tmp_path))


def test_unparsable_config_is_config_unparsable(model_copy: Path) -> None:
    """A config.json that is not JSON is config_unparsable."""
    (model_copy / "config.json").write_text("{model_type: llama")
    with pytest.raises(ConfigUnparsable):
        resolve_path_source(str(model_copy))


def test_config_that_is_not_an_object_is_config_not_object(model_copy: Path) -> None:
    """A config.json holding a list is config_not_object."""
    (model_copy / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigNotObject):
        resolve_path_source(str(model_copy))


def test_directory_without_weights_is_model_invalid(model_copy: Path) -> None:
    """A model directory whose indexed weights are missing is refused."""
    (model_copy / "model.safetensors").unlink()
    with pytest.raises(ModelInvalid, match="lacks weight shards"):
        resolve_path_source(str(model_copy))


@pytest.mark.fast
def test_hf_cache_location_follows_hf_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """HF_HUB_CACHE wins over HF_HOME, which wins over the XDG default."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hf_hub_cache() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "direct"))
    assert hf_hub_cache() == tmp_path / "direct"


def test_repo_source_binds_revision_and_blobs(
    monkeypatch: pytest.MonkeyPatch, tiny_model: Path, tmp_path: Path
) -> None:
    """A cached repo binds its revision and each file's blob id and size."""
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snapshot = build_hf_cache_repo(tmp_path, "org/tiny", tiny_model)
    source, _ = resolve_repo_source("org/tiny")
    assert source["kind"] == "hf_cache"
    assert source["revision"] == snapshot.name
    weights = next(f for f in source["files"] if f["name"] == "model.safetensors")
    assert weights["blob"] == os.path.basename(os.readlink(snapshot / "model.safetensors"))
    assert weights["size"] == (tiny_model / "model.safetensors").stat().st_size


@pytest.mark.fast
def test_repo_not_cached_is_model_not_local(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A repo absent from the cache is model_not_local, and nothing is downloaded."""
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelNotLocal, match="not in the Hugging Face cache"):
        resolve_repo_source("org/absent")


def test_incomplete_snapshot_is_model_not_local(
    monkeypatch: pytest.MonkeyPatch, tiny_model: Path, tmp_path: Path
) -> None:
    """A snapshot missing its weights is model_not_local."""
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    build_hf_cache_repo(tmp_path, "org/partial", tiny_model, complete=False)
    with pytest.raises(ModelNotLocal, match="lacks weight shards"):
        resolve_repo_source("org/partial")


def test_dangling_blob_link_is_model_not_local(
    monkeypatch: pytest.MonkeyPatch, tiny_model: Path, tmp_path: Path
) -> None:
    """A snapshot link whose blob is gone is model_not_local."""
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    snapshot = build_hf_cache_repo(tmp_path, "org/dangling", tiny_model)
    (snapshot / "config.json").resolve().unlink()
    with pytest.raises(ModelNotLocal):
        resolve_repo_source("org/dangling")


def test_download_in_progress_is_model_not_local(
    monkeypatch: pytest.MonkeyPatch, tiny_model: Path, tmp_path: Path
) -> None:
    """A blob still being downloaded (a .incomplete file) keeps the repo from being served."""
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    snapshot = build_hf_cache_repo(tmp_path, "org/busy", tiny_model)
    shutil.copy(tiny_model / "config.json", snapshot.parent.parent / "blobs" / "abc.incomplete")
    with pytest.raises(ModelNotLocal, match="download in progress"):
        resolve_repo_source("org/busy")


@pytest.mark.fast
@pytest.mark.parametrize("repo", ["noslash", "a/b/c", "../x", "org/"])
def test_malformed_repo_id_is_invalid_arguments(repo: str) -> None:
    """A repo id that is not ORG/NAME is a usage error."""
    with pytest.raises(InvalidArguments):
        resolve_repo_source(repo)
