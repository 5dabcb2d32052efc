"""Helpers shared by the lora tests: the arguments of a small training, and the status entry schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from tests.conftest import REGISTRY

STATUS_ENTRY = Draft202012Validator(
    {"$ref": "mlx-agent/training_receipt.json#/$defs/status_entry"},
    registry=REGISTRY,
    format_checker=Draft202012Validator.FORMAT_CHECKER,
)


def train_args(model: Path, data: Path, adapter: Path, *extra: str) -> list[str]:
    """Return the arguments of a small lora train on the tiny model (two layers, batches of two)."""
    return [
        "lora",
        "train",
        "--path",
        str(model),
        "--data",
        str(data),
        "--adapter-path",
        str(adapter),
        "--num-layers",
        "2",
        "--batch-size",
        "2",
        "--iters",
        "3",
        *extra,
    ]


def assert_status_entry(entry: dict[str, Any]) -> None:
    """Fail with every violation of one ``lora status`` entry against its schema."""
    errors = sorted(STATUS_ENTRY.iter_errors(entry), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
