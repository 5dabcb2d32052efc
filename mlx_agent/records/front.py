"""What the front reads and reports: its config (``schemas/front_config.json``), its persisted policy and its state."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field, with_config
from typing_extensions import TypedDict

from mlx_agent.records.plan import (
    FileCheck,
    IdlePolicy,
    KvCacheRecord,
    ModelPolicyRecord,
    PrefixCacheRecord,
    PromptCacheRecord,
    SourceRecord,
    WorkerRecord,
)
from mlx_agent.records.types import STRICT, AbsPath, Count, Positive, Seconds


@with_config(STRICT)
class FrontModelConfig(TypedDict):
    """One model as the front reads it from its config (its names keyed as the plan's and the flags)."""

    served_model_name: Annotated[str, Field(min_length=1)]
    alias: list[Annotated[str, Field(min_length=1)]]
    hidden_names: list[str]
    max_tokens: Positive | None
    max_tokens_ceiling: Positive | None
    context_window: Positive | None
    weight_bytes: Count | None
    file_checks: list[FileCheck]
    runtime_checks: list[FileCheck]
    source: SourceRecord  # the base model's bound identity, rechecked before every load
    draft_source: SourceRecord | None  # the draft model's, rechecked with it
    prompt_cache: PromptCacheRecord | None
    policy: ModelPolicyRecord
    worker: WorkerRecord
    # How many requests the worker runs at once; the front holds the rest in its queue (None or absent: unknown).
    worker_slots: NotRequired[Positive | None]
    greedy_alone: NotRequired[bool]  # --prompt-lookup: the worker serves a greedy request alone
    kv_cache: NotRequired[KvCacheRecord | None]  # --kv-bits: what the per-request memory check counts per element
    prefix_cache: NotRequired[PrefixCacheRecord | None]  # mlx-vlm's APC as planned (cache_stats.py); None: off
    vision_cache_size: NotRequired[Positive | None]  # an mlx-vlm chat worker's vision feature cache; None: none


@with_config(STRICT)
class FrontConfig(TypedDict):
    """The config file the front reads (``schemas/front_config.json``)."""

    format_version: Annotated[str, Field(pattern=r"^2\.[0-9]+$")]
    host: Literal["127.0.0.1"]
    port: Annotated[int, Field(ge=1, le=65535)]
    mode: Literal["eager", "jit"]
    models: Annotated[list[FrontModelConfig], Field(min_length=1)]
    min_headroom_gb: Seconds | None
    policy_path: AbsPath
    control_token_path: AbsPath
    api_key_path: AbsPath | None
    max_body_bytes: Annotated[int, Field(ge=1024)]
    max_connections: Annotated[int, Field(ge=1)]
    header_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    keepalive_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    body_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    body_min_rate: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    body_grace: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    socket_dir: Annotated[str, Field(pattern=r"^(/.*)?$")]  # "" means a private temporary directory
    max_loaded: Positive | None
    log_prompts: bool
    max_queue: NotRequired[Positive]  # absent in older configs: wire.MAX_QUEUE
    stall_timeout: NotRequired[Annotated[float, Field(gt=0, allow_inf_nan=False)]]  # absent: wire.STALL_TIMEOUT_S


@with_config(STRICT)
class PolicyDocument(IdlePolicy):
    """The whole policy ``serve policy`` sends (and each model's, as status reports it)."""

    min_headroom_gb: Seconds | None


@with_config(STRICT)
class PolicyFile(TypedDict):
    """The policy a front persists after ``serve policy`` (it wins over its config's on the next start)."""

    format_version: str
    min_headroom_gb: Seconds | None
    models: dict[str, IdlePolicy]
    updated_at: str


@with_config(STRICT)
class WorkerState(TypedDict):
    """A loaded worker as the front reports it."""

    pid: int
    transport: str
    address: str
    started_at: str | None
    ready_at: str | None
    log_path: str


@with_config(STRICT)
class QueueState(TypedDict):
    """A model's requests as the front holds them: waiting for its worker, running in it, and the bounds."""

    waiting: int  # the queue's depth: behind a load, or for one of the worker's slots
    running: int
    slots: int | None  # how many the worker runs at once (None: unknown, the front holds none back)
    max_queue: int
    queue_full: int  # requests refused so far because the queue was full
    insufficient_memory: int  # requests refused so far because their KV cache would not fit


@with_config(STRICT)
class StallState(TypedDict):
    """The health of a model's worker: how long its running requests have had nothing from it."""

    stall_timeout: float
    quiet_s: float | None  # seconds since the worker last sent a running request a byte (None: none runs)
    wedged: int  # workers found wedged and replaced so far


@with_config(STRICT)
class LoadProgress(TypedDict):
    """A load in progress: the bytes of the model's parameters read from its weight files so far, of all."""

    loaded_bytes: int | None
    total_bytes: int | None
    fraction: float | None
    started_at: str | None


@with_config(STRICT)
class PrefillProgress(TypedDict):
    """A request still reading its prompt: tokens read so far, of those it must read, and at what rate."""

    processed_tokens: int | None
    prompt_tokens: int | None
    fraction: float | None
    tokens_per_second: float | None  # over the steps after the first (None until two were read)
    started_at: str | None


@with_config(STRICT)
class ModelWindow(TypedDict):
    """What a model did over the last minute (fewer seconds while the front is younger), from 1 s samples."""

    seconds: float
    requests: int  # requests that ended
    completion_tokens: int
    tokens_per_second: float  # completion tokens over the window's seconds
    prompt_tokens: int
    cached_tokens: int
    cache_hit_share: float | None  # cached / prompt tokens (None without prompt tokens)
    ttft_ms: float | None  # mean time to first token of the streams that ended
    prefill_tokens_per_second: float  # prompt tokens the worker read, over the window's seconds
    tokens_series: list[int]  # completion tokens of each second, oldest first


@with_config(STRICT)
class MachineMemory(TypedDict):
    """The machine's memory when the status was read (None when it cannot be read)."""

    total_bytes: int | None
    available_bytes: int | None


@with_config(STRICT)
class VisionCacheState(TypedDict):
    """An mlx-vlm chat worker's vision feature cache: its size (mlx-vlm reports no fill over HTTP)."""

    size: Positive  # images whose projected features are kept (--vision-cache-size, or mlx-vlm's 20)


@with_config(STRICT)
class ModelCaches(TypedDict):
    """An mlx-vlm chat model's caches, as its worker reports them (gateway/openai/cache_stats.py)."""

    prefix: dict[str, Any]  # the /v1/cache/stats entry as the control token sees it (mlx-vlm's figures)
    vision: VisionCacheState


@with_config(STRICT)
class ModelState(TypedDict):
    """One model of a front: its state, its worker, its policy and what it has done."""

    name: str
    aliases: list[str]
    model_state: Literal["unloaded", "loading", "loaded", "failed", "wedged"]
    worker: WorkerState | None
    policy: PolicyDocument
    memory_check: dict[str, Any] | None
    load_blocked_reason: str | None
    open_requests: int
    open_streams: int
    last_error: dict[str, Any] | None
    loads: int
    evictions: int
    worker_exits: int  # workers that exited on their own; a preloaded model's is started again at once
    weight_bytes: int | None
    memory_estimate_bytes: int | None  # what a load needs: weights x 1.10 + the runtime allowance
    last_used: str | None
    idle_since: str | None
    idle_unload_at: str | None
    queue: QueueState
    stall: StallState
    # What the worker reports and the front samples (gateway/models/progress.py); absent from fronts before them.
    load_progress: NotRequired[LoadProgress | None]  # while loading, once the worker reads its weights
    prefill: NotRequired[list[PrefillProgress]]
    worker_rss_bytes: NotRequired[int | None]
    window: NotRequired[ModelWindow]
    caches: NotRequired[ModelCaches]  # front state 2.1: an mlx-vlm chat model's prefix and vision caches
    # front state 2.2: what the model serves (text, vision, embedding, speech, transcription, image_generation)
    # and the endpoints that answer it (gateway/model_kinds.py).
    kind: NotRequired[str]
    endpoints: NotRequired[list[str]]


@with_config(STRICT)
class FrontState(TypedDict):
    """The front's control status document (``GET /mlx-agent/status``)."""

    format_version: str
    pid: int
    port: int
    mode: str
    started_at: str | None
    ready: bool
    max_loaded: int | None
    min_headroom_gb: float | None
    machine_memory: NotRequired[MachineMemory]
    models: list[ModelState]
