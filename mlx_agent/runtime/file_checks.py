"""Recheck reviewed files (adapters) inside the server process, right before the model loads.

The supervisor passes ``--mlx-agent-expect PATH=SHA256:SIZE`` for every bound file; the entry strips
these from argv before the runtime parses it. On a mismatch the entry prints one ``mlx-agent-error``
line (JSON) that the supervisor turns into the same error code, and exits without loading anything.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from mlx_agent.runtime.report import ERROR_PREFIX, EXIT_REFUSED, refuse

FLAG = "--mlx-agent-expect"

__all__ = ["ERROR_PREFIX", "EXIT_REFUSED", "changed_files", "refuse_if_changed", "split_expectations"]


def split_expectations(argv: list[str]) -> tuple[list[tuple[Path, str, int]], list[str]]:
    """Return the expected files and the argv without the expectation flags."""
    expected: list[tuple[Path, str, int]] = []
    rest: list[str] = []
    words = iter(argv)
    for word in words:
        if word != FLAG:
            rest.append(word)
            continue
        path, _, identity = next(words, "").rpartition("=")
        digest, _, size = identity.partition(":")
        expected.append((Path(path), digest, int(size)))
    return expected, rest


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(4 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def changed_files(expected: list[tuple[Path, str, int]]) -> list[dict[str, object]]:
    """Return one record per expected file whose size or content is not what was reviewed."""
    changed: list[dict[str, object]] = []
    for path, digest, size in expected:
        if not path.is_file() or path.is_symlink():
            changed.append({"path": str(path), "expected_sha256": digest, "actual": "missing"})
            continue
        actual_size = path.stat().st_size
        actual = _sha256(path) if actual_size == size else None
        if actual_size != size or actual != digest:
            changed.append({"path": str(path), "expected_sha256": digest, "expected_size": size,
                            "actual_sha256": actual, "actual_size": actual_size})
    return changed


def refuse_if_changed(expected: list[tuple[Path, str, int]]) -> None:
    """Exit the process with an ``adapter_changed`` report if any expected file changed."""
    changed = changed_files(expected)
    if not changed:
        return
    refuse("adapter_changed", "adapter files changed since the plan was reviewed; not loading", {"files": changed})
