"""File identity: full hashes of small files, cheap identity of weights, safetensors headers."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import ModelInvalid
from mlx_agent.files import sha256_file
from mlx_agent.identity import (
    HASH_PROGRESS,
    directory_identity,
    safetensors_header_sha256,
    source_changes,
    with_digests,
)

pytestmark = pytest.mark.fast


def write_safetensors(path: Path, data_bytes: int = 16) -> bytes:
    """Write a minimal safetensors file with one uint8 tensor and return its header bytes."""
    header = json.dumps({"w": {"dtype": "U8", "shape": [data_bytes], "data_offsets": [0, data_bytes]}}).encode()
    raw = struct.pack("<Q", len(header)) + header
    path.write_bytes(raw + b"\0" * data_bytes)
    return raw


def test_sha256_file_matches_hashlib(tmp_path: Path) -> None:
    """The chunked hash equals hashlib over the whole content, across chunk boundaries."""
    data = bytes(range(256)) * 40000
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_header_hash_covers_only_the_header(tmp_path: Path) -> None:
    """The safetensors header hash covers the length prefix and header, not the tensor data."""
    path = tmp_path / "w.safetensors"
    raw = write_safetensors(path)
    assert safetensors_header_sha256(path) == hashlib.sha256(raw).hexdigest()


def _header(doc: object) -> bytes:
    raw = json.dumps(doc).encode()
    return struct.pack("<Q", len(raw)) + raw


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x01\x02",
        struct.pack("<Q", 10) + b"{}",
        struct.pack("<Q", 2) + b"[]",
        struct.pack("<Q", 2**40),
        _header({"w": {"dtype": "U8", "shape": [4]}}),
        _header({"w": {"dtype": "U8", "shape": [4], "data_offsets": [8, 4]}}),
        _header({"w": {"dtype": "U8", "shape": ["4"], "data_offsets": [0, 4]}}),
        _header({"w": [1, 2]}),
    ],
)
def test_corrupt_safetensors_is_model_invalid(tmp_path: Path, content: bytes) -> None:
    """Truncated, non-object, absurd headers and tensors without their fields are refused as model_invalid."""
    path = tmp_path / "w.safetensors"
    path.write_bytes(content)
    with pytest.raises(ModelInvalid):
        safetensors_header_sha256(path)


def test_directory_identity_hashes_small_files_and_stats_weights(tmp_path: Path) -> None:
    """Small files carry sha256; weights carry size, mtime_ns, ctime_ns, inode and header hash, never a full hash."""
    (tmp_path / "config.json").write_text("{}")
    write_safetensors(tmp_path / "model.safetensors")
    (tmp_path / ".hidden").write_text("x")
    records = {r["name"]: r for r in directory_identity(tmp_path)}
    assert set(records) == {"config.json", "model.safetensors"}
    assert records["config.json"]["sha256"] == hashlib.sha256(b"{}").hexdigest()
    weight = records["model.safetensors"]
    assert set(weight) == {"name", "size", "mtime_ns", "ctime_ns", "inode", "header_sha256"}


def _model_dir(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    write_safetensors(model / "model.safetensors", data_bytes=3 * 1024 * 1024)
    return model


def _forge_stat(source: dict[str, Any], model: Path) -> dict[str, Any]:
    """Give the bound records the files' current stat, as an attacker able to set ctime back would achieve."""
    files = []
    for record in source["files"]:
        st = (model / record["name"]).stat()
        if "mtime_ns" in record:
            record = {**record, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}
        files.append(record)
    return {**source, "files": files}


def test_verified_weights_catch_an_edit_that_stat_identity_misses(tmp_path: Path) -> None:
    """With full digests an in-place edit is caught even when every stat field matches; without them it is not."""
    model = _model_dir(tmp_path)
    source = {"kind": "path", "path": str(model), "files": directory_identity(model)}
    verified = with_digests(source)
    weight = next(f for f in verified["files"] if f["name"] == "model.safetensors")
    assert weight["sha256"] == sha256_file(model / "model.safetensors")
    with open(model / "model.safetensors", "r+b") as fh:
        fh.seek(-1, 2)
        fh.write(b"\x01")
    assert source_changes(_forge_stat(verified, model)) == [{"name": "model.safetensors", "reason": "changed"}]
    assert source_changes(_forge_stat(source, model)) == []


def test_verified_hashing_reports_progress_to_its_watcher(tmp_path: Path) -> None:
    """Full hashing reports a running byte count that ends at the total, at preview and at every recheck."""
    model = _model_dir(tmp_path)
    source = {"kind": "path", "path": str(model), "files": directory_identity(model)}
    seen: list[tuple[int, int]] = []
    token = HASH_PROGRESS.set(lambda done, total: seen.append((done, total)))
    try:
        verified = with_digests(source)
        size = (model / "model.safetensors").stat().st_size
        assert seen[0] == (0, size) and seen[-1] == (size, size)
        seen.clear()
        assert source_changes(verified) == []
        assert seen[-1] == (size, size)
    finally:
        HASH_PROGRESS.reset(token)


def test_a_cache_blob_that_does_not_hash_to_its_name_is_refused(tmp_path: Path) -> None:
    """--verify-weights refuses an HF cache blob whose content is not what its sha256 name says."""
    model = _model_dir(tmp_path)
    blob = tmp_path / ("ab" * 32)
    blob.write_bytes(b"not the content the name promises")
    (model / "weights.safetensors").symlink_to(blob)
    source = {
        "kind": "hf_cache",
        "path": str(model),
        "files": [{"name": "weights.safetensors", "blob": blob.name, "size": blob.stat().st_size}],
    }
    with pytest.raises(ModelInvalid, match="does not hash to its blob name"):
        with_digests(source)
