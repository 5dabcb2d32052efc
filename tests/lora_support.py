"""Helpers shared by the lora tests: the arguments of a small training, its start and status, and the status schema."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.conftest import REGISTRY, Agent, assert_valid

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


# A guard against hangs only: a few iterations of the tiny model take seconds on one CPU core.
PATIENCE_S = 180.0


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    """Poll ``check`` until it returns something truthy; fail after PATIENCE_S."""
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def start(agent: Agent, args: list[str]) -> dict[str, Any]:
    """Preview and confirm ``args``; return the confirm envelope's data."""
    preview = agent.run(*args)
    assert preview.rc == 0, preview.stdout + preview.stderr
    assert_valid("training_plan", preview.data["plan"])
    started = agent.run(*args, "--confirm", "--preview-hash", preview.data["plan"]["preview_hash"])
    assert started.rc == 0, started.stdout + started.stderr
    assert_valid("training_receipt", started.data["receipt"])
    return started.data


def status_of(agent: Agent, receipt_path: str) -> dict[str, Any]:
    """Return the status entry of one training, checked against its schema."""
    result = agent.run("lora", "status", "--receipt", receipt_path)
    assert result.rc == 0, result.stdout
    entry: dict[str, Any] = result.data["trainings"][0]
    assert_status_entry(entry)
    return entry


def settled(agent: Agent, receipt_path: str, state: str) -> dict[str, Any]:
    """Wait until a training's status is ``state``, and return that entry."""

    def check() -> dict[str, Any] | None:
        entry = status_of(agent, receipt_path)
        return entry if entry["state"] == state else None

    entry: dict[str, Any] = wait_for(f"state {state}", check)
    return entry
