"""What the plan hands a wrapped worker: one record, carried whole as one reviewed argument and parsed once.

uvicorn hands its child the whole ``Config`` (``_subprocess.get_subprocess(config, ...)``); so does the plan: it
fills a ``WorkerContract`` (``plan/worker_plan.py``), and the worker's argv carries it as ``CONTRACT_FLAG JSON``,
part of the argv the plan hashes, so a reviewed plan binds every value in it. The worker's entry splits its argv
once (``split_worker_argv``) and each part of the entry reads the fields it needs; the runtime's own flags
(``--model``, ``--max-tokens``, ``--adapter-path``, ``--draft-model``...) stay its argv.

Every field has a writer: the record has no defaults, so the plan names each one, and ``from_json`` refuses a
document that lacks a field or has one more. What the front fills in per load (the worker's socket and its kept
prompt cache directory, placeholders in the reviewed argv) stays a flag of its own: the front replaces argv
words, never a value inside the reviewed document.

Standard library and ``wire`` only: the entry reads it before mlx is imported.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

from mlx_agent.wire import PROMPT_CACHE_FLAG, SOCKET_FLAG

CONTRACT_FLAG = "--mlx-agent-contract"


class ContractInvalid(ValueError):
    """A worker's contract argument that is not the record (the entry refuses it: ``invalid_arguments``)."""


@dataclass(frozen=True)
class FileCheck:
    """A file the worker rechecks by content before it loads: its whole sha256 and size."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class ModelCheck:
    """A file of the base model each rank of a group rechecks in its own copy (what every copy shares).

    ``method``: ``sha256`` (full content), ``header`` (sha256 of a safetensors header), ``blob`` (the HF cache
    blob's name) or ``size`` (``digest`` empty).
    """

    path: str
    method: str
    digest: str
    size: int


MODEL_CHECK_METHODS = ("sha256", "header", "blob", "size")


@dataclass(frozen=True)
class WorkerContract:
    """Everything the plan fixes for one wrapped worker (module docstring); every field written by the plan."""

    # Rechecked before anything loads: the adapter's files and its training receipt (adapter_changed), the
    # --chat-template file (read once, its checked bytes kept), and a group's base model, per rank (model_changed).
    file_checks: tuple[FileCheck, ...]
    chat_template: FileCheck | None
    model_checks: tuple[ModelCheck, ...]
    tool_parser: str | None  # --tool-parser's name, given to mlx_lm's own parser selection
    # --prompt-lookup and --m5-prefill, and the fingerprint they were reviewed with (runtime_changed if it moved).
    prompt_lookup: bool
    m5_prefill: bool
    versions: dict[str, str | None]  # dependency -> version
    sources: dict[str, str | None]  # bundled source or support file -> sha256
    context_window: int | None  # longer prompts are refused, replies cut to the room left
    prompt_cache_disk_gb: float  # what every kept prompt cache entry of the home may take (0: none kept)
    # The front's body cap and read deadlines, applied to what the worker reads off its own socket.
    max_body_bytes: int
    header_timeout: float
    body_timeout: float
    # The reply limits a request that names none gets (runtime/serving/limits.py).
    reasoning_budget: int
    hedge_limit: int
    repeat_limit: int
    limit_answers: bool

    def to_json(self) -> str:
        """Return the record as the canonical JSON the argv carries."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> WorkerContract:
        """Return the record a contract argument holds; raise ``ContractInvalid`` for anything else."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ContractInvalid(f"{CONTRACT_FLAG} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ContractInvalid(f"{CONTRACT_FLAG} must be a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}
        if set(doc) != names:
            missing, extra = sorted(names - set(doc)), sorted(set(doc) - names)
            raise ContractInvalid(f"{CONTRACT_FLAG} lacks {missing} or has unknown {extra}")
        return cls(
            file_checks=tuple(_file_check(v, "file_checks") for v in _list(doc, "file_checks")),
            chat_template=None if doc["chat_template"] is None else _file_check(doc["chat_template"], "chat_template"),
            model_checks=tuple(_model_check(v) for v in _list(doc, "model_checks")),
            tool_parser=_optional(doc, "tool_parser", str),
            prompt_lookup=_typed(doc, "prompt_lookup", bool),
            m5_prefill=_typed(doc, "m5_prefill", bool),
            versions=_names(doc, "versions"),
            sources=_names(doc, "sources"),
            context_window=_optional(doc, "context_window", int),
            prompt_cache_disk_gb=_number(doc, "prompt_cache_disk_gb", least=0.0),
            max_body_bytes=_count(doc, "max_body_bytes", least=1),
            header_timeout=_number(doc, "header_timeout", least=None),
            body_timeout=_number(doc, "body_timeout", least=None),
            reasoning_budget=_count(doc, "reasoning_budget"),
            hedge_limit=_count(doc, "hedge_limit"),
            repeat_limit=_count(doc, "repeat_limit"),
            limit_answers=_typed(doc, "limit_answers", bool),
        )


def _typed(doc: dict[str, Any], name: str, kind: type) -> Any:
    value = doc[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ContractInvalid(f"{CONTRACT_FLAG}: {name} must be a {kind.__name__}, not {value!r}")
    return value


def _optional(doc: dict[str, Any], name: str, kind: type) -> Any:
    return None if doc[name] is None else _typed(doc, name, kind)


def _count(doc: dict[str, Any], name: str, least: int = 0) -> int:
    value: int = _typed(doc, name, int)
    if value < least:
        raise ContractInvalid(f"{CONTRACT_FLAG}: {name} must be {least} or more, not {value}")
    return value


def _number(doc: dict[str, Any], name: str, *, least: float | None) -> float:
    """Return a finite number: at least ``least``, or above 0 where ``least`` is None (a deadline)."""
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ContractInvalid(f"{CONTRACT_FLAG}: {name} must be a number, not {value!r}")
    if (value <= 0) if least is None else (value < least):
        raise ContractInvalid(f"{CONTRACT_FLAG}: {name} is out of range: {value}")
    return float(value)


def _list(doc: dict[str, Any], name: str) -> list[Any]:
    value: list[Any] = _typed(doc, name, list)
    return value


def _names(doc: dict[str, Any], name: str) -> dict[str, str | None]:
    value: dict[str, Any] = _typed(doc, name, dict)
    if not all(v is None or isinstance(v, str) for v in value.values()):
        raise ContractInvalid(f"{CONTRACT_FLAG}: {name} must map names to strings or null")
    return value


def _file_check(value: Any, where: str) -> FileCheck:
    if (
        not isinstance(value, dict)
        or set(value) != {"path", "sha256", "size"}
        or not isinstance(value["path"], str)
        or not isinstance(value["sha256"], str)
        or len(value["sha256"]) != 64
        or not isinstance(value["size"], int)
        or isinstance(value["size"], bool)
        or value["size"] < 0
    ):
        raise ContractInvalid(f"{CONTRACT_FLAG}: {where} holds {value!r}, not {{path, sha256, size}}")
    return FileCheck(value["path"], value["sha256"], value["size"])


def _model_check(value: Any) -> ModelCheck:
    if (
        not isinstance(value, dict)
        or set(value) != {"path", "method", "digest", "size"}
        or value["method"] not in MODEL_CHECK_METHODS
        or not all(isinstance(value[k], str) for k in ("path", "digest"))
        or not isinstance(value["size"], int)
        or isinstance(value["size"], bool)
    ):
        raise ContractInvalid(f"{CONTRACT_FLAG}: model_checks holds {value!r}, not {{path, method, digest, size}}")
    return ModelCheck(value["path"], value["method"], value["digest"], value["size"])


def contract_argv(contract: WorkerContract) -> list[str]:
    """Return the worker's argv words carrying ``contract``."""
    return [CONTRACT_FLAG, contract.to_json()]


@dataclass(frozen=True)
class Started:
    """What a wrapped worker's argv carries besides its runtime's own flags: the contract, and the front's per load."""

    contract: WorkerContract
    socket: str | None  # the Unix socket the front gives it (else the runtime's own host and port)
    prompt_cache_dir: str | None  # where the kept prompt cache is restored from and saved to (named by identity)


def split_worker_argv(argv: list[str]) -> tuple[Started, list[str]]:
    """Take the contract and the front's per-load flags out of ``argv``; return them and the runtime's own argv.

    The one place a worker's argv is split; raise ``ContractInvalid`` without exactly one contract, or with a
    prompt cache directory and no disk to keep it on.
    """
    ours: dict[str, list[str]] = {CONTRACT_FLAG: [], SOCKET_FLAG: [], PROMPT_CACHE_FLAG: []}
    rest: list[str] = []
    words = iter(argv)
    for word in words:
        if word in ours:
            value = next(words, None)
            if value is None:
                raise ContractInvalid(f"{word} needs a value")
            ours[word].append(value)
        else:
            rest.append(word)
    if len(ours[CONTRACT_FLAG]) != 1:
        raise ContractInvalid(f"a wrapped worker takes exactly one {CONTRACT_FLAG} (the plan writes it)")
    contract = WorkerContract.from_json(ours[CONTRACT_FLAG][0])
    cache_dir = ours[PROMPT_CACHE_FLAG][-1] if ours[PROMPT_CACHE_FLAG] else None
    if cache_dir is not None and contract.prompt_cache_disk_gb <= 0:
        raise ContractInvalid(f"{PROMPT_CACHE_FLAG} needs the contract's prompt_cache_disk_gb above 0")
    socket = ours[SOCKET_FLAG][-1] if ours[SOCKET_FLAG] else None
    return Started(contract, socket, cache_dir), rest
