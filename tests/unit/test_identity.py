"""File identity: full hashes of small files, cheap identity of weights, safetensors headers."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

from mlx_agent.errors import ModelInvalid
from mlx_agent.files import sha256_file
from mlx_agent.plan.identity import directory_identity, safetensors_header_sha256


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


@pytest.mark.parametrize(
    "content", [b"", b"\x01\x02", struct.pack("<Q", 10) + b"{}", struct.pack("<Q", 2) + b"[]", struct.pack("<Q", 2**40)]
)
def test_corrupt_safetensors_is_model_invalid(tmp_path: Path, content: bytes) -> None:
    """Truncated, non-object or absurd headers are refused as model_invalid."""
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
