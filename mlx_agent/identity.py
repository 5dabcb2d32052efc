"""Content identity of model and adapter files, cheap enough to compute at every preview.

Small files are hashed in full. Weight files are never read in full at preview: a plain directory binds
their size, mtime_ns, ctime_ns (which no user can set back) and inode plus a sha256 of the safetensors header;
the HF cache binds the blob id, which already is the content hash. ``--verify-weights`` (``with_digests``)
adds every weight file's full sha256 (a blob's must equal its name). ``source_changes`` recomputes the same
identity, digests included, which every worker load does before the model is loaded (``model_changed``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from contextvars import ContextVar
from pathlib import Path

from mlx_agent.errors import ModelInvalid
from mlx_agent.files import sha256_file

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".npz", ".bin", ".pt", ".pth")
SMALL_FILE_LIMIT = 64 * 1024 * 1024
# A safetensors header is JSON describing tensors; anything near this size is corruption, not a model.
MAX_HEADER_BYTES = 100 * 1024 * 1024
# An LFS blob of the HF cache is named by its sha256; a git blob (small files) by its sha1.
SHA256_NAME = re.compile(r"^[0-9a-f]{64}$")
# Who watches full hashing: called with (bytes hashed so far, bytes to hash); the CLI draws a progress bar.
HASH_PROGRESS: ContextVar[Callable[[int, int], None] | None] = ContextVar("hash_progress", default=None)


def _is_tensor(entry: object) -> bool:
    """Say whether a header entry describes a tensor as the format requires (what sizes are read from)."""
    if not isinstance(entry, dict):
        return False
    shape, offsets = entry.get("shape"), entry.get("data_offsets")
    return (
        isinstance(entry.get("dtype"), str)
        and isinstance(shape, list)
        and all(type(n) is int and n >= 0 for n in shape)
        and isinstance(offsets, list)
        and len(offsets) == 2
        and all(type(n) is int for n in offsets)
        and 0 <= offsets[0] <= offsets[1]
    )


def read_safetensors_header(path: Path) -> tuple[bytes, dict[str, Any]]:
    """Return the raw header bytes (length prefix included) and the parsed header of a safetensors file."""
    try:
        with open(path, "rb") as fh:
            prefix = fh.read(8)
            if len(prefix) != 8:
                raise ValueError("file is shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise ValueError(f"header length {length} is implausible")
            body = fh.read(length)
            if len(body) != length:
                raise ValueError("header is truncated")
        header = json.loads(body)
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
        for name, tensor in header.items():
            if name != "__metadata__" and not _is_tensor(tensor):
                raise ValueError(f"tensor {name!r} lacks a dtype, a shape or two ordered data_offsets")
    except (OSError, ValueError) as exc:
        raise ModelInvalid(f"{path} is not a readable safetensors file: {exc}", details={"path": str(path)}) from exc
    return prefix + body, header


def safetensors_header_sha256(path: Path) -> str:
    """Return the sha256 hex of a safetensors file's header (its tensor names, shapes and offsets)."""
    raw, _ = read_safetensors_header(path)
    return hashlib.sha256(raw).hexdigest()


def is_weight_file(name: str) -> bool:
    """Say whether a file name is a weight file, which is never read in full at preview."""
    return name.endswith(WEIGHT_SUFFIXES)


def file_identity(path: Path, name: str) -> dict[str, Any]:
    """Return the identity record of one file of a plain model directory."""
    st = path.stat()
    if is_weight_file(name) or st.st_size > SMALL_FILE_LIMIT:
        record: dict[str, Any] = {
            "name": name,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino,
        }
        if name.endswith(".safetensors"):
            record["header_sha256"] = safetensors_header_sha256(path)
        return record
    return {"name": name, "size": st.st_size, "sha256": sha256_file(path)}


def list_files(root: Path) -> list[str]:
    """Return the relative names of the files under ``root``, sorted, skipping hidden entries."""
    names: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel = os.path.relpath(dirpath, root)
        for filename in filenames:
            if filename.startswith("."):
                continue
            names.append(filename if rel == "." else f"{rel}/{filename}".replace(os.sep, "/"))
    return sorted(names)


def directory_identity(root: Path) -> list[dict[str, Any]]:
    """Return the identity records of every file in a plain model directory."""
    return [file_identity(root / name, name) for name in list_files(root)]


def _unhashed(source: Mapping[str, Any]) -> list[tuple[Path, int]]:
    """Return the files of a source whose identity does not yet include their full content hash."""
    root = Path(source["path"])
    return [(root / f["name"], f["size"]) for f in source["files"] if "sha256" not in f]


def _hasher(total: int) -> Callable[[Path], str]:
    """Return a function hashing files in full that reports the running count to ``HASH_PROGRESS``."""
    watcher = HASH_PROGRESS.get()
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if watcher is not None:
            watcher(done, total)

    if watcher is not None:
        watcher(0, total)
    return lambda path: sha256_file(path, advance)


def with_digests(source: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``source`` with the full sha256 of every file it bound only by stat or blob name (--verify-weights).

    A cache blob named by a sha256 must hash to its name: anything else is a corrupt or altered cache.
    """
    todo = _unhashed(source)
    digest = _hasher(sum(size for _, size in todo))
    root = Path(source["path"])
    files = []
    for record in source["files"]:
        record = dict(record)
        if "sha256" not in record:
            path = root / record["name"]
            record["sha256"] = digest(path)
            blob = record.get("blob", "")
            if SHA256_NAME.match(blob) and record["sha256"] != blob:
                raise ModelInvalid(
                    f"{record['name']} in the Hugging Face cache does not hash to its blob name: the cache is "
                    "corrupt or was altered; delete the repo from the cache and download it again",
                    details={"path": str(path), "blob": blob, "sha256": record["sha256"]},
                )
        files.append(record)
    return {**source, "files": files}


def _current(root: Path, record: Mapping[str, Any], digest: Callable[[Path], str]) -> dict[str, Any]:
    name = record["name"]
    path = root / name
    if "blob" in record:  # an HF cache link: its blob's name is its content hash
        target = path.resolve()
        now: dict[str, Any] = {"name": name, "blob": target.name, "size": target.stat().st_size}
    else:
        now = file_identity(path, name)
    if "sha256" in record and "sha256" not in now:  # bound with --verify-weights: hash it again in full
        now["sha256"] = digest(path) if now.get("size") == record["size"] else ""
    return now


def source_changes(source: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Return the files of a model source that are no longer what the plan bound (empty: all unchanged).

    Each change is ``{"name", "reason"}``: ``missing``, or ``changed`` (its recomputed identity differs).
    """
    root = Path(source["path"])
    verified = [f for f in source["files"] if "sha256" in f and ("blob" in f or "mtime_ns" in f)]
    digest = _hasher(sum(f["size"] for f in verified))
    changes: list[dict[str, Any]] = []
    for record in source["files"]:
        try:
            now = _current(root, record, digest)
        except (OSError, ModelInvalid):
            changes.append({"name": record["name"], "reason": "missing"})
            continue
        if now != dict(record):
            changes.append({"name": record["name"], "reason": "changed"})
    return changes
