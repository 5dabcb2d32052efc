"""The reviewed serve plan (``schemas/serve_plan.json``) and the records it is made of, recipes included.

Every record of ``mlx_agent.records`` is a ``TypedDict``: code that builds or renders one is checked key by key,
while the records stay plain JSON at run time. The same declarations give the JSON Schemas in ``schemas/``
(``scripts/schemas`` writes them, a test compares) and the front's validation of its config (pydantic's
``TypeAdapter``). The CLI imports these modules only under ``TYPE_CHECKING``: its start-up never pays for them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field, with_config
from typing_extensions import TypedDict

from mlx_agent.records.types import STRICT, AbsPath, Count, Positive, Seconds, Sha256


@with_config(STRICT)
class FileRecord(TypedDict):
    """One file of a model directory: content-hashed (small files), blob-bound (HF cache) or stat-bound (weights)."""

    name: str
    size: int
    sha256: NotRequired[str]
    blob: NotRequired[str]
    mtime_ns: NotRequired[int]
    ctime_ns: NotRequired[int]
    inode: NotRequired[int]
    header_sha256: NotRequired[str]


@with_config(STRICT)
class SourceRecord(TypedDict):
    """Where a model's files are and what they are."""

    kind: str  # "path" or "hf_cache"
    path: str
    model_type: str | None
    files: list[FileRecord]
    repo: NotRequired[str]
    revision: NotRequired[str]


@with_config(STRICT)
class RuntimeRecord(TypedDict, total=False):
    """The program that serves a model: the wrapped entry, a runtime's own module, or an executable."""

    name: str
    recipe_sha256: str
    launcher: str  # "wrapped", "module" or "native"
    interpreter: str | None
    interpreter_sha256: str
    module: str
    entry_sources: dict[str, str]
    runtime_sources: dict[str, str]  # the runtime package's modules the worker relies on, by sha256
    versions: dict[str, str | None]
    adapter_enabled: bool
    executable: str
    executable_from: str
    executable_sha256: str
    native_entry_sha256: str  # runtime/entries/native_entry.py, which an executable runs under (its port, its key)
    argv_prefix: list[str]


@with_config(STRICT)
class ContentRecord(TypedDict):
    """A file bound by its whole content."""

    name: str
    size: int
    sha256: str


@with_config(STRICT)
class TrainingReceiptRef(TypedDict):
    """The training receipt that vouches for an adapter."""

    path: str
    sha256: str
    size: int
    id: str | None


@with_config(STRICT)
class AdapterRecord(TypedDict):
    """A LoRA adapter bound by the content of its two files."""

    path: str
    fine_tune_type: str
    num_layers: int
    files: list[ContentRecord]
    training_receipt: NotRequired[TrainingReceiptRef]


@with_config(STRICT)
class PromptLookupRecord(TypedDict):
    """``--prompt-lookup`` as a plan records it (``decode_profile``): asked, whether it applies, fingerprint."""

    requested: bool
    applied: bool
    reasons: list[str]
    max_draft_tokens: NotRequired[int]
    lookup_window: NotRequired[int]
    versions: NotRequired[dict[str, str | None]]
    support_sha256: NotRequired[str]
    sources: NotRequired[dict[str, str | None]]


@with_config(STRICT)
class M5PrefillRecord(TypedDict):
    """``--m5-prefill`` as a plan records it (``prefill_kernel``): asked, whether it is eligible, fingerprint."""

    requested: bool
    eligible: bool
    reasons: list[str]
    gpu_architecture: NotRequired[str | None]
    macos: NotRequired[str | None]
    versions: NotRequired[dict[str, str | None]]
    min_rows: NotRequired[int]
    support_sha256: NotRequired[str]
    sources: NotRequired[dict[str, str | None]]


@with_config(STRICT)
class ReadinessRecord(TypedDict, total=False):
    """A readiness check: GET ``path`` (or POST ``post``), expect ``status``, ``json`` fields, ``nonnull`` fields."""

    path: str
    status: int
    json: dict[str, Any] | None
    post: dict[str, Any] | None
    nonnull: list[str]
    timeout_s: float
    loaded_before_listen: bool


@with_config(STRICT)
class ThinkingFlags(TypedDict):
    """Thinking switched by server flags: the ``on`` or ``off`` list is appended to the worker's argv."""

    kind: Literal["flags"]
    on: list[str]
    off: list[str]


@with_config(STRICT)
class ThinkingTemplateArgument(TypedDict):
    """Thinking switched by one chat-template argument, ``key``, passed through the template-arguments flag."""

    kind: Literal["chat_template_args"]
    flag: str
    key: str


@with_config(STRICT)
class RecipeCapabilities(TypedDict):
    """What a runtime can be asked for; the plan refuses an option whose capability the recipe lacks."""

    adapter: bool
    thinking: ThinkingFlags | ThinkingTemplateArgument | None
    chat_template_args: str | None  # the flag taking chat-template arguments as JSON, or None: not accepted
    kernels: list[Literal["prompt_lookup", "m5_prefill"]]
    jit: bool
    draft_model: NotRequired[bool]
    kv_bits: NotRequired[bool]
    chat_template: NotRequired[bool]  # --chat-template FILE: the worker renders with the reviewed file instead
    tool_parser: NotRequired[bool]  # --tool-parser NAME: the worker reads calls with the named parser
    batch_slots: NotRequired[Positive]  # the worker batches this many requests at once (else the front holds them)
    serial_with: NotRequired[list[Literal["draft_model", "kv_bits"]]]  # options under which it serves one at a time
    vision: NotRequired[bool]  # it serves models with a vision tower (config.json's markers); others get none
    groups: NotRequired[bool]  # its wrapped worker serves one model across an mlx.launch group of ranks
    reply_limits: NotRequired[bool]  # its wrapped worker applies --reasoning-budget, --hedge-limit, ... (limits.py)
    # Options passed to the runtime's own flag of the same name (mlx-vlm's; ``decoding.PASSED_THROUGH``).
    thinking_budget: NotRequired[bool]  # --thinking-budget N: a request's default thinking budget
    max_kv_size: NotRequired[bool]  # --max-kv-size N: a rotating KV cache, and a context limit
    vision_cache_size: NotRequired[bool]  # --vision-cache-size N: images whose vision features are kept
    prefix_cache: NotRequired[bool]  # mlx-vlm's automatic prefix cache (APC_* environment): --prefix-cache-gb
    kv_quant_scheme: NotRequired[bool]  # --kv-quant-scheme and half --kv-bits (TurboQuant)
    draft_kind: NotRequired[bool]  # --draft-kind: the drafter's family (dflash, eagle3, mtp)
    num_draft_tokens: NotRequired[bool]  # --num-draft-tokens; absent: as draft_model (mlx_lm's)
    adapter_layout: NotRequired[Literal["mlx_lm", "mlx_vlm"]]  # the adapter files its loader reads (plan/adapter.py)


@with_config(STRICT)
class Recipe(TypedDict):
    """One runtime mlx-agent serves models with: ``recipes/NAME.json``, shipped in the wheel.

    ``name`` is the file's stem and the plan's ``runtime.name`` (``mlx_lm``, ``mlx-vlm``: the values the --json
    contract already carries, so neither is respelled), and the key of ``runtime.entry.ENTRIES`` when the
    recipe names a ``wrapper``.
    """

    format_version: Annotated[str, Field(pattern=r"^1\.\d+$")]
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")]
    description: str
    package: str  # the import package whose modules are bound (mlx_lm)
    distribution: str  # the installed distribution that must be present (mlx-lm)
    dependencies: list[str]  # distributions whose versions the plan records
    native_module: str  # the runtime's own server, run with ``python -m`` when it is not wrapped
    wrapper: NotRequired[str]  # our entry module (wire.ENTRY_MODULE): the worker runs wrapped
    patched_modules: NotRequired[list[str]]  # globs under the package the wrapper relies on, bound by sha256
    cuts_to_context: NotRequired[bool]  # the wrapped worker takes the model's context window and cuts replies
    keeps_prompt_cache: NotRequired[bool]  # the wrapped worker can keep its prompt cache on disk
    default_port: Annotated[int, Field(ge=1, le=65535)]
    native_key: NotRequired[Literal["entry"]]  # run from another environment, the native entry checks the key
    secret_env: NotRequired[str]  # the environment variable of the runtime's own key check
    model_field: NotRequired[Literal["path"]]  # the worker names its model by its path, not the served name
    # The runtime embeds (POST /v1/embeddings), speaks (/v1/audio/speech), transcribes (/v1/audio/transcriptions,
    # /v1/audio/translations) or draws (/v1/images/generations, /v1/images/edits) rather than chats.
    kind: NotRequired[Literal["embedding", "speech", "transcription", "image_generation"]]
    argv: list[str]  # the runtime's own server arguments ({model}, {host}, {port}, {max_tokens})
    wrapper_argv: NotRequired[list[str]]  # the wrapped entry's arguments ({socket} too)
    readiness: ReadinessRecord
    native_readiness: NotRequired[ReadinessRecord]  # when run from another environment
    capabilities: RecipeCapabilities


@with_config(STRICT)
class FileCheck(TypedDict):
    """A file a worker load rechecks by content (adapter files, a training receipt, the interpreter)."""

    path: AbsPath
    sha256: Sha256
    size: Count
    via: NotRequired[AbsPath]  # the path argv[0] gives (a venv's bin/python), whose links must still lead to path


@with_config(STRICT)
class WorkerRecord(TypedDict):
    """How a front starts one model's worker: argv template, environment, readiness, log."""

    transport: Literal["unix", "tcp"]  # "unix": argv has {socket}; "tcp": port_env, or {port} in argv
    cuts_to_context: bool  # the worker itself cuts a reply to what the context window leaves after the prompt
    secret_env: str | None  # a TCP worker that requires a bearer key read from this variable (one per launch)
    port_env: NotRequired[str | None]  # a TCP worker that reads its port from this variable, not from argv
    # What the model serves: "text" chat, "vision" chat that reads images, "embedding" vectors, "speech" audio
    # from text, "transcription" text from audio, "image_generation" images from a prompt. Absent in a config
    # written before it: chat whose images go to the worker as sent.
    kind: NotRequired[Literal["text", "vision", "embedding", "speech", "transcription", "image_generation"]]
    model_name: str  # what the worker calls its one model in requests and replies
    argv: Annotated[list[str], Field(min_length=1)]
    executable: NotRequired[AbsPath]  # the file argv[0] led to at review: the worker is started by it, argv[0] kept
    env: dict[str, str]
    cwd: AbsPath
    readiness: ReadinessRecord
    ready_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    stop_timeout: Annotated[float, Field(gt=0, allow_inf_nan=False)]  # TERM to KILL (a worker saving its cache)
    log_path: AbsPath


# The one shape of the idle policy (a docstring here would be the schemas' description): a front unloads an idle
# model ``idle_timeout`` seconds after its last request (0: never), unless ``keep_loaded``. The plan reviews it per
# model (``ModelPolicyRecord``), the front persists it per model (``front.PolicyFile``), and ``serve policy`` sends
# it with the front's memory floor (``front.PolicyDocument``, the JSON of ``mlx_agent.policy.Policy``).
@with_config(STRICT)
class IdlePolicy(TypedDict):
    """One model's idle policy, as a front persists it."""

    idle_timeout: Seconds
    keep_loaded: bool


@with_config(STRICT)
class ModelPolicyRecord(IdlePolicy):
    """When a front loads and unloads one model on its own."""

    preload: bool


@with_config(STRICT)
class DraftRecord(TypedDict):
    """Speculative decoding: the draft model, bound like the served one, and its step (or its family)."""

    source: SourceRecord
    num_draft_tokens: int | None  # None: mlx_lm's default
    draft_kind: NotRequired[Literal["dflash", "eagle3", "mtp"]]  # plan 3.3: mlx-vlm's --draft-kind, where given


@with_config(STRICT)
class KvCacheRecord(TypedDict):
    """KV-cache quantization, keyed as its flags are named (``--kv-bits``, ``--kv-group-size``, ...)."""

    # Whole bits for uniform quantization (mx.quantize's); mlx-vlm's TurboQuant also takes halves (plan 3.3).
    kv_bits: Literal[2, 3, 4, 5, 6, 8] | Annotated[float, Field(ge=1.5, le=7.5, multiple_of=0.5)]
    kv_group_size: Literal[32, 64, 128]
    kv_quant_scheme: NotRequired[Literal["uniform", "turboquant"]]  # plan 3.3: mlx-vlm's, always written there


@with_config(STRICT)
class ReplyLimitsRecord(TypedDict):
    """The wrapped worker's reply limits for a request naming none (``--reasoning-budget`` and friends; 0: off)."""

    reasoning_budget: Count
    hedge_limit: Count
    repeat_limit: Count
    limit_answers: bool


@with_config(STRICT)
class HostRecord(TypedDict):
    """One host of a group, as mlx.launch's hostfile names it (rank 0, this machine, has ssh 127.0.0.1)."""

    ssh: str
    ips: list[str]
    rdma: NotRequired[list[str | None]]  # jaccl's devices, from mlx.distributed_config


@with_config(STRICT)
class HostfileRecord(TypedDict):
    """The --hostfile a group was planned from, bound by its bytes."""

    path: AbsPath
    sha256: str


@with_config(STRICT)
class GroupRecord(TypedDict):
    """One model served by a group of ranks (mlx.launch): hosts, backend, parallelism, the launcher's hostfile."""

    hosts: Annotated[list[HostRecord], Field(min_length=2)]
    hostfile: HostfileRecord | None  # None: the hosts came from --hosts
    hostfile_path: AbsPath  # the reviewed hosts, written at confirm; the launcher reads this copy
    backend: Literal["ring", "jaccl"]
    ranks: Annotated[int, Field(ge=2)]
    parallelism: Literal["tensor", "pipeline"]
    ring_port: Annotated[int, Field(ge=1, le=65535)] | None  # the ranks' first link port (ring backend)
    # No --ring-port: the plan holds none (null) and confirm chose the run; the receipt's plan holds what it chose.
    ring_port_chosen: NotRequired[bool]


@with_config(STRICT)
class PromptCacheRecord(TypedDict):
    """Where a wrapped worker keeps its prompt cache across unloads (``kept_cache``: one directory per identity)."""

    root: AbsPath  # $MLX_AGENT_HOME/prompt-cache; the front names the model's directory in it at each spawn
    disk_gb: Annotated[float, Field(gt=0, allow_inf_nan=False)]  # --prompt-cache-disk-gb: the home's saved entries


@with_config(STRICT)
class PrefixCacheRecord(TypedDict):
    """mlx-vlm's automatic prefix cache (APC) as its worker runs it: blocks in memory, a bounded copy on disk."""

    block_size: Positive  # tokens per block (mlx-vlm's default)
    num_blocks: Positive  # blocks kept in memory (mlx-vlm's default pool)
    disk_path: AbsPath | None  # beside the server's receipt (port_files.PortFiles.prefix_cache); None: memory only
    disk_max_gb: Annotated[float, Field(ge=0, allow_inf_nan=False)]  # --prefix-cache-gb


@with_config(STRICT)
class ChatTemplateRecord(TypedDict):
    """The chat template a model's worker renders with tools, and how it is bound.

    A checkpoint's file is bound with the source; ``--chat-template FILE`` here, by sha256 and size, rechecked at
    every load.
    """

    source: Literal["checkpoint", "file"]
    path: AbsPath  # the file holding it (tokenizer_config.json for a template inside it)
    name: str | None  # of the checkpoint's named templates, the one rendered with tools ("tool_use", "default")
    sha256: NotRequired[Sha256]  # the file's, as the source record binds it (a plain directory) or --chat-template
    blob: NotRequired[str]  # a cached checkpoint's: the file's blob id, as the source record binds it
    size: NotRequired[Count]


@with_config(STRICT)
class AgentsRecord(TypedDict):
    """What a chat model can do for an agent, decided from its template at preview (plan/agent_support.py)."""

    chat_template: ChatTemplateRecord | None  # None: the model has none, and every chat request fails
    renders_tools: bool  # a request's tools appear in the rendered prompt
    render_error: str | None  # what the template cannot render in the sandbox, and the error
    tool_parser: str | None  # the parser that reads the model's calls; None: they arrive as text
    tool_parser_from: Literal["option", "checkpoint", "template", "runtime"]  # runtime: chosen there, not predicted
    thinking: bool  # the template thinks, or can be told to
    context_window: Positive | None


@with_config(STRICT)
class ModelPlan(TypedDict):
    """One served model of a plan: its names, files, runtime, options and worker (keys named as the flags)."""

    served_model_name: str  # --served-model-name: what clients send as ``model``
    alias: list[str]  # every --alias (a glob such as 'claude-*' too)
    source: SourceRecord
    requested_runtime: str
    runtime_reason: str
    runtime: RuntimeRecord
    thinking: str
    chat_template_args: dict[str, Any]
    adapter: AdapterRecord | None
    decode_profile: PromptLookupRecord  # --prompt-lookup
    prefill_kernel: M5PrefillRecord  # --m5-prefill
    draft: DraftRecord | None
    kv_cache: KvCacheRecord | None
    prompt_cache: PromptCacheRecord | None
    group: GroupRecord | None
    max_tokens: int | None  # None: not set, a request without a limit gets what the context leaves
    max_tokens_ceiling: int | None
    context_window: int | None
    weight_bytes: int | None
    file_checks: list[FileCheck]
    runtime_checks: list[FileCheck]  # interpreter, entry and runtime sources, rechecked before every load
    policy: ModelPolicyRecord
    worker: WorkerRecord
    agents: NotRequired[AgentsRecord | None]  # plan 3.1; None for an embedding model
    reply_limits: NotRequired[ReplyLimitsRecord | None]  # plan 3.2; None where the worker applies none
    decode_concurrency: NotRequired[Positive | None]  # plan 3.2: --decode-concurrency; None: the runtime's own
    thinking_budget: NotRequired[Positive | None]  # plan 3.3: mlx-vlm's --thinking-budget; None: not set
    max_kv_size: NotRequired[Positive | None]  # plan 3.3: mlx-vlm's --max-kv-size; None: not set
    vision_cache_size: NotRequired[Positive | None]  # plan 3.3: mlx-vlm's --vision-cache-size; None: its default
    prefix_cache: NotRequired[PrefixCacheRecord | None]  # plan 3.4: mlx-vlm's APC (--prefix-cache-gb); None: off


@with_config(STRICT)
class FrontRecord(TypedDict):
    """The front of a plan: how it loads models, its private files and its limits."""

    mode: str  # "eager" or "jit"
    config_path: str
    token_path: str
    policy_path: str
    api_key_file: str | None
    min_headroom_gb: float | None
    max_body_bytes: int
    max_connections: int  # open at once; more are closed at once
    header_timeout: float  # seconds a connection may take to send its first request's headers
    keepalive_timeout: float  # seconds an idle keep-alive connection stays open
    body_timeout: float  # seconds a request's body may take once its headers are in
    body_min_rate: float  # bytes/s a body must average once body_grace has passed (0: no rate)
    body_grace: float  # seconds before body_min_rate applies
    socket_dir: str  # "" means a private temporary directory the front makes at start
    max_loaded: int | None  # how many models may be loaded at once (None: as many as memory allows)
    log_prompts: bool  # the front's request lines carry the prompt text
    max_queue: NotRequired[int]  # per model, requests that may wait for its worker (older plans: wire.MAX_QUEUE)
    stall_timeout: NotRequired[float]  # seconds running requests may get nothing from the worker before it is wedged
    interpreter_sha256: str  # the interpreter that runs the front, by content
    sources: dict[str, str]  # the front's own sources, by sha256


@with_config(STRICT)
class UnitRecord(TypedDict):
    """A launchd or systemd unit that runs the plan's argv at login."""

    kind: str
    name: str
    path: str
    restart: str
    log_path: str
    content: str
    commands: dict[str, list[list[str]]]


@with_config(STRICT)
class ModelsFileRecord(TypedDict):
    """The models file a fleet plan was built from, bound by its bytes."""

    path: str
    sha256: str
    size: int


@with_config(STRICT)
class ServePlan(TypedDict):
    """The reviewed plan of ``serve start``: a front on the port and its models."""

    format_version: str
    operation: str
    supervisor: str
    host: str
    port: int
    base_url: str
    front: FrontRecord
    models: list[ModelPlan]
    argv: list[str]
    env: dict[str, str]
    cwd: str
    readiness: ReadinessRecord
    ready_timeout: float
    models_file: NotRequired[ModelsFileRecord]
    unit: NotRequired[UnitRecord]
    preview_hash: NotRequired[str]


@with_config(STRICT)
class ProcessIdentity(TypedDict):
    """Who a live process is: pid, process group, birth time and the command line the kernel reports."""

    pid: int
    pgid: int
    create_time: float
    cmdline: list[str]
    start_ticks: NotRequired[int]  # Linux: birth in clock ticks since boot, unmoved by wall-clock steps
