"""Recheck reviewed files (adapters, the base model) inside the server process, right before the model loads.

The plan passes ``--mlx-agent-expect PATH=SHA256:SIZE`` (``wire.FILE_CHECK_FLAG``) for every bound file; the
entry takes these out of argv before the runtime parses it. On a mismatch the entry prints one refusal line
(``adapter_changed``) that the supervisor turns into the same error, and exits without loading anything.

A rank of a group serving one model across hosts (docs/distributed.md) also gets the base model's files as
``--mlx-agent-expect-model PATH=METHOD:HEX:SIZE`` (``wire.MODEL_CHECK_FLAG``): each host holds its own copy, so
they are bound by what every copy shares (content, header or blob hashes, sizes), never by inode or mtime. On
a mismatch the rank prints ``model_changed`` with its rank and host and exits with ``wire.EXIT_MODEL_CHANGED``.

A ``--chat-template`` file comes as ``--mlx-agent-chat-template PATH=SHA256:SIZE`` (``wire.CHAT_TEMPLATE_FLAG``):
``reviewed_template`` reads it once and hands on the bytes it checked, so the text the worker renders with is
the reviewed one, not a file swapped between a check and a read. A mismatch is refused as an adapter's is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_agent.errors import AdapterChanged, InvalidArguments, ModelChanged, exit_refused, print_refusal
from mlx_agent.files import changed_files
from mlx_agent.wire import CHAT_TEMPLATE_FLAG, EXIT_MODEL_CHANGED, FILE_CHECK_FLAG, MODEL_CHECK_FLAG


def take_flag(argv: list[str], flag: str) -> tuple[list[str], list[str]]:
    """Return the value after each ``flag`` in ``argv``, and ``argv`` without those pairs."""
    values: list[str] = []
    rest: list[str] = []
    words = iter(argv)
    for word in words:
        if word == flag:
            values.append(next(words, ""))
        else:
            rest.append(word)
    return values, rest


def split_expectations(argv: list[str]) -> tuple[list[tuple[Path, str, int]], list[str]]:
    """Return the expected files and the argv without the expectation flags."""
    values, rest = take_flag(argv, FILE_CHECK_FLAG)
    expected: list[tuple[Path, str, int]] = []
    for value in values:
        path, _, identity = value.rpartition("=")
        digest, _, size = identity.partition(":")
        expected.append((Path(path), digest, int(size)))
    return expected, rest


def refuse_if_changed(expected: list[tuple[Path, str, int]]) -> None:
    """Exit the process with an ``adapter_changed`` refusal if any expected file changed."""
    changed = changed_files(expected)
    if changed:
        exit_refused(
            AdapterChanged("adapter files changed since the plan was reviewed; not loading", details={"files": changed})
        )


def _expectation(value: str, flag: str) -> tuple[Path, str, int]:
    """Return ``PATH=SHA256:SIZE`` read; refuse a malformed one."""
    path, _, identity = value.rpartition("=")
    digest, _, size = identity.partition(":")
    if not path or len(digest) != 64 or not size.isdigit():
        exit_refused(InvalidArguments(f"{flag} {value!r} is not PATH=SHA256:SIZE", details={"value": value}))
    return Path(path), digest, int(size)


def reviewed_template(argv: list[str]) -> tuple[str | None, list[str]]:
    """Return the reviewed ``--chat-template`` text (None without one) and argv without its flag.

    The file is read once: its bytes are the ones hashed and the ones returned. Gone, unreadable, or not the
    reviewed size and content, the worker refuses before anything loads (``adapter_changed``, as the front's
    check of the plan's ``file_checks`` calls it).
    """
    import hashlib

    values, rest = take_flag(argv, CHAT_TEMPLATE_FLAG)
    if not values:
        return None, rest
    path, digest, size = _expectation(values[-1], CHAT_TEMPLATE_FLAG)
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
            return data.decode("utf-8"), rest
        change = {**entry, "size": len(data), "sha256": actual, "reason": "content_changed"}
    exit_refused(
        AdapterChanged(
            f"the chat template file {path} changed since the plan was reviewed; not loading",
            details={"files": [change]},
        )
    )


@dataclass(frozen=True)
class ModelExpectation:
    """One reviewed file of the base model, bound by what is the same on every host's copy (never an inode)."""

    path: Path
    method: str  # one of METHODS
    digest: str
    size: int


# How a file is bound (wire.MODEL_CHECK_FLAG): its full sha256, the sha256 of its safetensors header, the name
# of its HF cache blob (itself a content hash), or its size alone (a weight file the plan bound by stat).
METHODS = ("sha256", "header", "blob", "size")


def split_model_expectations(argv: list[str]) -> tuple[list[ModelExpectation], list[str]]:
    """Return the base model's expected files and the argv without ``MODEL_CHECK_FLAG``; refuse a malformed one."""
    values, rest = take_flag(argv, MODEL_CHECK_FLAG)
    expected: list[ModelExpectation] = []
    for value in values:
        path, _, identity = value.rpartition("=")
        method, _, tail = identity.partition(":")
        digest, _, size = tail.partition(":")
        if not path or method not in METHODS or not size.isdigit():
            exit_refused(
                InvalidArguments(f"{MODEL_CHECK_FLAG} {value!r} is not PATH=METHOD:HEX:SIZE", details={"value": value})
            )
        expected.append(ModelExpectation(Path(path), method, digest, int(size)))
    return expected, rest


def model_changes(expected: list[ModelExpectation]) -> list[dict[str, Any]]:
    """Return one record per expected model file that is gone or not what was reviewed (empty: all unchanged)."""
    from mlx_agent.errors import ModelInvalid
    from mlx_agent.identity import safetensors_header_sha256

    changed: list[dict[str, Any]] = []
    for item in expected:
        if item.method == "sha256":
            changed += changed_files([(item.path, item.digest, item.size)])
            continue
        entry: dict[str, Any] = {"path": str(item.path), "method": item.method, "expected_size": item.size}
        try:
            target = item.path.resolve(strict=True) if item.method == "blob" else item.path
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


def refuse_if_model_changed(expected: list[ModelExpectation], rank: int, host: str) -> None:
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
