"""Recheck reviewed files (adapters, the base model) inside the server process, right before the model loads.

The worker's contract lists every bound file (``file_checks``: path, sha256, size). On a mismatch the entry
prints one refusal line (``adapter_changed``) that the supervisor turns into the same error, and exits without
loading anything.

A rank of a group serving one model across hosts (docs/distributed.md) also gets the base model's files
(``model_checks``: path, method, digest, size): each host holds its own copy, so they are bound by what every
copy shares (content, header or blob hashes, sizes), never by inode or mtime. On a mismatch the rank prints
``model_changed`` with its rank and host and exits with ``wire.EXIT_MODEL_CHANGED``.

A ``--chat-template`` file comes as the contract's ``chat_template``: ``reviewed_template`` reads it once and
hands on the bytes it checked, so the text the worker renders with is the reviewed one, not a file swapped
between a check and a read. A mismatch is refused as an adapter's is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlx_agent.errors import AdapterChanged, ModelChanged, exit_refused, print_refusal
from mlx_agent.files import changed_files
from mlx_agent.wire import EXIT_MODEL_CHANGED
from mlx_agent.worker_contract import FileCheck, ModelCheck


def refuse_if_changed(expected: Sequence[FileCheck]) -> None:
    """Exit the process with an ``adapter_changed`` refusal if any expected file changed."""
    changed = changed_files([(Path(c.path), c.sha256, c.size) for c in expected])
    if changed:
        exit_refused(
            AdapterChanged("adapter files changed since the plan was reviewed; not loading", details={"files": changed})
        )


def reviewed_template(bound: FileCheck | None) -> str | None:
    """Return the reviewed ``--chat-template`` text (None without one).

    The file is read once: its bytes are the ones hashed and the ones returned. Gone, unreadable, or not the
    reviewed size and content, the worker refuses before anything loads (``adapter_changed``, as the front's
    check of the plan's ``file_checks`` calls it).
    """
    import hashlib

    if bound is None:
        return None
    path, digest, size = Path(bound.path), bound.sha256, bound.size
    entry: dict[str, Any] = {"path": str(path), "expected_size": size, "expected_sha256": digest}
    try:
        if path.is_symlink():
            raise FileNotFoundError(path)
        data = path.read_bytes()
    except FileNotFoundError:
        change = {**entry, "reason": "missing"}
    except OSError as error:
        change = {**entry, "reason": "unreadable", "error": error.strerror or str(error)}
    else:
        actual = hashlib.sha256(data).hexdigest()
        if len(data) == size and actual == digest:
            return data.decode("utf-8")
        change = {**entry, "size": len(data), "sha256": actual, "reason": "content_changed"}
    exit_refused(
        AdapterChanged(
            f"the chat template file {path} changed since the plan was reviewed; not loading",
            details={"files": [change]},
        )
    )


def model_changes(expected: Sequence[ModelCheck]) -> list[dict[str, Any]]:
    """Return one record per expected model file that is gone or not what was reviewed (empty: all unchanged)."""
    from mlx_agent.errors import ModelInvalid
    from mlx_agent.identity import safetensors_header_sha256

    changed: list[dict[str, Any]] = []
    for item in expected:
        path = Path(item.path)
        if item.method == "sha256":
            changed += changed_files([(path, item.digest, item.size)])
            continue
        entry: dict[str, Any] = {"path": item.path, "method": item.method, "expected_size": item.size}
        try:
            target = path.resolve(strict=True) if item.method == "blob" else path
            if not target.is_file():
                changed.append({**entry, "reason": "missing"})
                continue
            size = target.stat().st_size
            if size != item.size:
                changed.append({**entry, "size": size, "reason": "size_changed"})
            elif item.method == "blob" and target.name != item.digest:
                changed.append(
                    {**entry, "expected_blob": item.digest, "blob": target.name, "reason": "content_changed"}
                )
            elif item.method == "header" and (now := safetensors_header_sha256(target)) != item.digest:
                changed.append({**entry, "expected_sha256": item.digest, "sha256": now, "reason": "content_changed"})
        except FileNotFoundError:
            changed.append({**entry, "reason": "missing"})
        except (OSError, ModelInvalid) as error:
            changed.append({**entry, "reason": "unreadable", "error": str(error)})
    return changed


def refuse_if_model_changed(expected: Sequence[ModelCheck], rank: int, host: str) -> None:
    """Exit with ``EXIT_MODEL_CHANGED`` and a ``model_changed`` refusal naming this rank and host, if files changed.

    Each rank of a group checks its own host's copy, before the group's collectives start.
    """
    changed = model_changes(expected)
    if not changed:
        return
    import sys

    names = ", ".join(f"{c['path']} ({c['reason']})" for c in changed[:5])
    message = (
        f"rank {rank} on host {host}: the model's files changed since the plan was reviewed "
        f"({len(changed)} file(s): {names}); not loading"
    )
    print(f"mlx-agent: model_changed: {message}", file=sys.stderr, flush=True)
    error = ModelChanged(message, details={"rank": rank, "host": host, "changed": changed})
    print_refusal(error)
    sys.exit(EXIT_MODEL_CHANGED)
