"""The serve receipt (``schemas/serve_receipt.json``): what ``serve start --confirm`` launched, and older receipts."""

from __future__ import annotations

from typing import Any, NotRequired

from pydantic import with_config
from typing_extensions import TypedDict

from mlx_agent.records.plan import AdapterRecord, M5PrefillRecord, PromptLookupRecord, ServePlan
from mlx_agent.records.types import STRICT


@with_config(STRICT)
class ReceiptModel(TypedDict):
    """One model as its receipt lists it for status: names, runtime, where its files are, what was reviewed."""

    served_model_name: str
    alias: list[str]
    runtime: str
    model: str  # the model's directory
    repo: str | None
    adapter: AdapterRecord | None
    decode_profile: PromptLookupRecord
    prefill_kernel: M5PrefillRecord


@with_config(STRICT)
class UnitReceiptRecord(TypedDict):
    """The launchd/systemd unit a receipt owns: where it is, the sha256 of what was written, its commands."""

    kind: str
    name: str
    path: str
    sha256: str
    commands: dict[str, list[list[str]]]


@with_config(STRICT)
class ServeReceipt(TypedDict):
    """What confirm launched (or installed), checked against the live process before it is trusted."""

    format_version: str
    kind: str
    supervisor: str
    port: int
    host: str
    base_url: str
    models: list[ReceiptModel]
    argv: list[str]
    log_path: str
    preview_hash: str
    plan: ServePlan
    pid: NotRequired[int]
    pgid: NotRequired[int]
    create_time: NotRequired[float]
    cmdline: NotRequired[list[str]]
    start_ticks: NotRequired[int]  # Linux: compared instead of create_time, which moves when the clock is stepped
    started_at: NotRequired[str]
    ready_at: NotRequired[str | None]
    confirm_pid: NotRequired[int]  # the CLI that confirmed it, waiting for readiness
    confirm_create_time: NotRequired[float]
    confirm_start_ticks: NotRequired[int]
    unit: NotRequired[UnitReceiptRecord]
    installed_at: NotRequired[str]


class OlderReceipt(TypedDict, total=False):
    """A receipt of a server without a front (format 1.x: a plain server or a JIT gateway), read for status and stop.

    Never written any more; only the fields status, stop and the port checks read are named.
    """

    format_version: str
    kind: str
    supervisor: str
    port: int
    host: str
    base_url: str
    runtime: str
    model: str
    repo: str | None
    adapter: AdapterRecord | None
    argv: list[str]
    pid: int
    pgid: int
    create_time: float
    cmdline: list[str]
    log_path: str
    preview_hash: str
    started_at: str
    ready_at: str | None
    confirm_pid: int
    confirm_create_time: float
    unit: UnitReceiptRecord
    installed_at: str
    plan: dict[str, Any]  # a 1.x plan: only its ``jit`` and ``adapter`` are read


# What ``supervise.receipts.read_receipt`` returns; ``has_front`` tells the two apart.
Receipt = ServeReceipt | OlderReceipt
