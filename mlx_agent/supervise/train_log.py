"""Progress of a training read from its log: iterations done, last train loss, last validation loss.

mlx_lm 0.32 reports through a rich console that styles its lines even when they go to a file, so escape
sequences are stripped first. After stripping, a train report reads ``   4    6.179 ▼    957    0.1k``
(iteration, loss, trend, tokens/s, tokens so far) and a validation report ``   4    val 6.089    0.02s``
(validation runs before the step of that number, so it measures the model after ``it - 1`` steps).
"""

from __future__ import annotations

import re
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
NUMBER = r"(nan|-?inf|-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
TRAIN_LINE = re.compile(rf"^\s*(\d+)\s+{NUMBER}\s+[▼▲]\s+[\d,]+\s+[\d.]+k\s*$")
VAL_LINE = re.compile(rf"^\s*(\d+)\s+val\s+{NUMBER}\s+[\d.]+s\s*$")
# Enough for thousands of reports; older lines do not change the answer unless no report is in the tail.
TAIL_BYTES = 1024 * 1024


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (colours, cursor movement, hyperlinks)."""
    return ANSI.sub("", text)


def parse(text: str) -> dict[str, Any]:
    """Return the last train and validation reports found in a log's text."""
    train: dict[str, Any] | None = None
    val: dict[str, Any] | None = None
    for raw in re.split(r"[\r\n]", strip_ansi(text)):
        if match := TRAIN_LINE.match(raw):
            train = {"iteration": int(match[1]), "loss": float(match[2])}
        elif match := VAL_LINE.match(raw):
            val = {"iteration": int(match[1]), "loss": float(match[2])}
    return {"train": train, "val": val}


def read_progress(log_path: Path) -> dict[str, Any]:
    """Return the last train and validation reports of a log (from its last MiB), or none if unreadable."""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - TAIL_BYTES))
            data = fh.read()
    except OSError:
        return {"train": None, "val": None}
    result = parse(data.decode("utf-8", "replace"))
    if result["train"] is None and size > TAIL_BYTES:
        result = parse(Path(log_path).read_bytes().decode("utf-8", "replace"))
    return result
