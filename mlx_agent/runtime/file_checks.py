"""Recheck reviewed files (adapters) inside the server process, right before the model loads.

The plan passes ``--mlx-agent-expect PATH=SHA256:SIZE`` (``wire.FILE_CHECK_FLAG``) for every bound file; the
entry takes these out of argv before the runtime parses it. On a mismatch the entry prints one refusal line
(``adapter_changed``) that the supervisor turns into the same error, and exits without loading anything.
"""

from __future__ import annotations

from pathlib import Path

from mlx_agent.errors import AdapterChanged, exit_refused
from mlx_agent.files import changed_files
from mlx_agent.wire import FILE_CHECK_FLAG


def split_expectations(argv: list[str]) -> tuple[list[tuple[Path, str, int]], list[str]]:
    """Return the expected files and the argv without the expectation flags."""
    expected: list[tuple[Path, str, int]] = []
    rest: list[str] = []
    words = iter(argv)
    for word in words:
        if word != FILE_CHECK_FLAG:
            rest.append(word)
            continue
        path, _, identity = next(words, "").rpartition("=")
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
