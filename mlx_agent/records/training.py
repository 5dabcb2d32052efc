"""The training receipt of ``lora train``: the processes it ran and the adapter it wrote."""

from __future__ import annotations

from typing import Any, NotRequired

from typing_extensions import TypedDict

from mlx_agent.records.plan import SourceRecord


class TrainedProcess(TypedDict):
    """A process of a training (its watcher or its trainer): who it is, and the argv it was started with."""

    pid: int
    pgid: int
    create_time: float | None
    cmdline: list[str] | None
    argv: list[str]
    start_ticks: NotRequired[int]


class TrainedFile(TypedDict):
    """An adapter file as the watcher recorded it after training."""

    sha256: str
    size: int


class TrainedAdapter(TypedDict):
    """The adapter a completed training wrote: its directory and its two files by name."""

    path: str
    files: dict[str, TrainedFile]  # adapter_config.json and adapters.safetensors


class TrainingReceipt(TypedDict):
    """A ``lora train`` receipt (``schemas/training_receipt.json``, written by hand; a test compares the keys).

    ``plan`` is the reviewed training plan (``schemas/training_plan.json``), read by key.
    """

    format_version: str
    kind: str
    id: str
    state: str  # "running", "completed" or "failed"; status says "interrupted" for a dead watcher's "running"
    preview_hash: str
    adapter_path: str
    log_path: str
    config_path: str
    started_at: str
    trainer_started_at: NotRequired[str | None]
    finished_at: str | None
    exit_code: int | None
    signal: NotRequired[str]
    reason: NotRequired[str | None]
    watcher: TrainedProcess
    trainer: TrainedProcess | None
    adapter: TrainedAdapter | None
    base: SourceRecord | None
    plan: dict[str, Any]
