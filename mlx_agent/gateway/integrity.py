"""Rechecking the files a plan bound by content (adapter weights and config, a training receipt) around each load."""

from __future__ import annotations

import hashlib
from typing import Any

from mlx_agent.gateway.config import FileCheck

CHUNK = 4 * 1024 * 1024


def _sha256(check: FileCheck) -> str:
    digest = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(check.path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            digest.update(view[:n])
    return digest.hexdigest()


def changed_files(checks: tuple[FileCheck, ...]) -> list[dict[str, Any]]:
    """Return one entry per file whose size or sha256 differs from the plan's (or that is gone); [] if all match."""
    changed: list[dict[str, Any]] = []
    for check in checks:
        entry: dict[str, Any] = {"path": str(check.path), "expected_size": check.size,
                                 "expected_sha256": check.sha256}
        try:
            size = check.path.stat().st_size
            if size != check.size:
                changed.append({**entry, "size": size, "reason": "size_changed"})
                continue
            digest = _sha256(check)
        except OSError as exc:
            changed.append({**entry, "reason": "unreadable", "error": exc.strerror or str(exc)})
            continue
        if digest != check.sha256:
            changed.append({**entry, "sha256": digest, "reason": "content_changed"})
    return changed
