"""The typed shape of ``mlx-agent pull``: its plan, its preview, its progress lines and its result.

Kept apart from ``records.py`` as ``catalog_records.py`` is; ``scripts/schemas`` generates ``schemas/pull_*.json``
from these declarations.
"""

from __future__ import annotations

from typing import Literal, NotRequired

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from mlx_agent.plan.catalog_records import Memory, Problem, Quantization

STRICT = ConfigDict(extra="forbid", strict=True)

Role = Literal["weights", "weight_index", "config", "tokenizer", "template", "processor", "code"]


@with_config(STRICT)
class PullFile(TypedDict):
    """One file the pull fetches, bound to the Hub's identity of it at the plan's commit."""

    name: str
    role: Role
    size: int
    blob: str  # its name in the cache's blobs/: the LFS sha256, else the git blob sha1 (the Hub's ETag)
    sha256: str | None  # an LFS file's content sha256, checked after the fetch
    git_sha1: str | None  # the git blob id, checked after the fetch for a file not in LFS


@with_config(STRICT)
class SkippedFile(TypedDict):
    """A file of the repo the pull leaves on the Hub, and why."""

    name: str
    size: int | None
    reason: Literal["code", "pickle", "gguf", "onnx", "other_format", "hidden", "subfolder", "not_needed"]


@with_config(STRICT)
class PullPlan(TypedDict):
    """What ``pull --confirm`` fetches: these files of the repo at this commit, into this cache."""

    format_version: str
    operation: Literal["pull"]
    endpoint: str
    repo: str
    revision: str
    commit: str
    cache_dir: str
    snapshot: str
    files: list[PullFile]
    skipped: list[SkippedFile]
    total_bytes: int
    preview_hash: NotRequired[str]


@with_config(STRICT)
class PullDisk(TypedDict):
    """The room for the fetch, read now: free space where the cache is, against what is not there yet."""

    path: str
    free_bytes: int | None
    floor_bytes: int | None
    present_bytes: int  # what the cache already holds of the plan's files (their blobs, by name and size)
    fetch_bytes: int
    fits: bool | None


@with_config(STRICT)
class Servable(TypedDict):
    """What ``serve start --runtime auto`` would make of the model once fetched, by the catalog's own rules."""

    problem: Problem | None  # the files fetched would not make a complete model (``check_complete``)
    runtime: str | None
    kind: Literal["text", "vision", "embedding", "speech", "transcription", "image_generation"] | None
    runtime_reason: str | None
    runtime_problem: Problem | None
    quantization: Quantization | None
    context_window: int | None
    vision: bool
    memory: Memory


@with_config(STRICT)
class PullPreview(TypedDict):
    """``pull --json``'s data: the plan to review, with the disk and servability read now (not hashed)."""

    plan: PullPlan
    disk: PullDisk
    servable: Servable
    requires_confirmation: bool


@with_config(STRICT)
class PullProgress(TypedDict):
    """One progress line of ``pull --confirm --json`` (a JSON document on one line, before the envelope)."""

    event: Literal["progress"]
    file: str
    file_done_bytes: int
    file_bytes: int
    done_bytes: int
    fetch_bytes: int


@with_config(STRICT)
class PullResult(TypedDict):
    """``pull --confirm --json``'s data: what was fetched, what was already there, and the receipt."""

    repo: str
    commit: str
    snapshot: str
    ref: str | None  # the cache's refs/ file written to name the commit (none when --revision is a commit)
    fetched: list[str]
    reused: list[str]
    fetched_bytes: int
    receipt_path: str
    requires_confirmation: bool
