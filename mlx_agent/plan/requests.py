"""What each command asks for, as records whose fields are their command-line options (see ``options.py``).

``COMMANDS`` maps each command to its record and to the flags of the command itself (``--json``, and
``--confirm --preview-hash`` for the two-step ones), which never reach the core. Importing this module costs
nothing beyond plain classes, so the ``--json`` fast path can read it on every call.
"""

from __future__ import annotations

from mlx_agent.plan import training_defaults as train
from mlx_agent.plan.options import Opt, Record, option
from mlx_agent.wire import HEDGE_LIMIT, MAX_QUEUE, REASONING_BUDGET, REPEAT_LIMIT, STALL_TIMEOUT_S

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Defaults of a serve plan.
DEFAULT_RUNTIME = "mlx_lm"
DEFAULT_READY_TIMEOUT = 120.0
# What MLX's quantization accepts for a KV cache (mx.quantize bits and group sizes).
KV_BITS = (2, 3, 4, 5, 6, 8)
# mlx-vlm's TurboQuant also takes half bits (turboquant._validate_bits: whole and .5 widths); a fractional width
# is TurboQuant's alone, so --kv-bits takes these besides KV_BITS where the recipe has ``kv_quant_scheme``.
KV_HALF_BITS = (1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5)
KV_QUANT_SCHEMES = ("uniform", "turboquant")
DRAFT_KINDS = ("dflash", "eagle3", "mtp")  # mlx-vlm's drafter families (its --draft-kind)
KV_GROUP_SIZES = (32, 64, 128)
DEFAULT_KV_GROUP_SIZE = 64  # mlx_lm's, written into the plan when --kv-bits comes without --kv-group-size
PORT = {"minimum": 1, "maximum": 65535}

JSON = Opt("--json", "flag", "Print one JSON envelope on stdout.", default=False)
CONFIRM = Opt("--confirm", "flag", "Act on the plan whose hash is given with --preview-hash.", default=False)
PREVIEW_HASH = Opt("--preview-hash", "str", "The preview_hash of the reviewed plan.")


class ReceiptsRecord(Record):
    """A record of a command that reads or writes receipts."""

    receipts_dir: str | None = option(
        "--receipts-dir", "str", "Base directory of receipts (default: $MLX_AGENT_HOME/receipts)."
    )


class ModelRequest(Record):
    """One model of a server: ``serve start``'s per-model options, or one ``[[model]]`` table of a models file.

    Declared once: the command line, the models file's validator (keys named as the fields) and the model's
    plan all read these options. ``scope`` says where each is given (see ``options.Opt``).
    """

    path: str | None = option("--path", "str", "Absolute path of a local model directory.", file_path="path")
    repo: str | None = option("--repo", "str", "ORG/NAME of a model already in the Hugging Face cache.")
    training_receipt: str | None = option(
        "--training-receipt",
        "str",
        "A completed `lora train` receipt: serves its pinned base model with its adapter.",
        file_path="path",
    )
    adapter_path: str | None = option(
        "--adapter-path",
        "str",
        "A local LoRA adapter directory (mlx_lm or mlx-vlm), bound by the content of its files.",
        file_path="path",
    )
    runtime: str = option(
        "--runtime",
        "str",
        "Runtime to serve with; auto reads the model's config.json.",
        default=DEFAULT_RUNTIME,
        choices_from="runtime_choices",
    )
    runtime_executable: str | None = option(
        "--runtime-executable", "str", "Absolute path of a runtime installed in another environment."
    )
    served_model_name: str | None = option(
        "--served-model-name",
        "str",
        "The model name clients use (default: the repo id, or the directory's name).",
        file_required=True,
        synonyms=("name",),
    )
    alias: tuple[str, ...] = option(
        "--alias",
        "multi",
        "Another name clients may use; a glob such as 'claude-*' (repeatable).",
        synonyms=("aliases",),
    )
    thinking: str | None = option(
        "--thinking",
        "str",
        "Ask the chat template to think (on) or not (off); default: the template's.",
        choices=("on", "off"),
    )
    thinking_budget: int | None = option(
        "--thinking-budget",
        "int",
        "mlx-vlm: the most tokens a thinking block may take when a request sets no thinking_budget.",
        minimum=1,
    )
    chat_template_args: str | None = option(
        "--chat-template-args", "json", "A JSON object of chat template arguments (mlx_lm), merged with --thinking."
    )
    chat_template: str | None = option(
        "--chat-template",
        "str",
        "mlx_lm: a jinja chat template file (absolute) the worker renders with instead of the checkpoint's.",
        file_path="path",
    )
    tool_parser: str | None = option(
        "--tool-parser",
        "str",
        "mlx_lm: the parser that reads the model's tool calls (an mlx_lm tool parser, or one of mlx-agent's).",
    )
    prompt_lookup: bool = option(
        "--prompt-lookup",
        "flag",
        "mlx_lm: draft greedy replies from the prompt and verify them (code edits); native batching otherwise.",
        default=False,
    )
    m5_prefill: bool = option(
        "--m5-prefill",
        "flag",
        "mlx_lm: the experimental M5 Q4 prompt kernel for eligible Qwen2 models; native elsewhere.",
        default=False,
    )
    prompt_cache_disk_gb: float = option(
        "--prompt-cache-disk-gb",
        "float",
        "mlx_lm: keep up to this many GB of prompt caches across unloads and restarts (0 keeps none).",
        default=4.0,
        minimum=0,
        scope="cli",
    )
    verify_weights: bool = option(
        "--verify-weights",
        "flag",
        "Hash every weight file in full and bind the digests, rechecked before every load (slower, exact).",
        default=False,
        scope="cli",
    )
    draft_model: str | None = option(
        "--draft-model",
        "str",
        "A small model of the same vocabulary (a path or a cached ORG/NAME) drafting for speculative decoding "
        "(mlx_lm; mlx-vlm: its drafter, see --draft-kind).",
        file_path="path_or_repo",
    )
    num_draft_tokens: int | None = option(
        "--num-draft-tokens", "int", "mlx_lm: tokens the draft model proposes per step (default: mlx_lm's).", minimum=1
    )
    draft_kind: str | None = option(
        "--draft-kind",
        "str",
        "mlx-vlm: the drafter's family (default: mlx-vlm reads it from the draft model's config).",
        choices=DRAFT_KINDS,
    )
    kv_bits: float | None = option(
        "--kv-bits",
        "float",
        "Quantize the KV cache to this many bits (2, 3, 4, 5, 6 or 8; mlx-vlm's TurboQuant also 1.5 to 7.5 by halves).",
        values=tuple(sorted((*KV_BITS, *KV_HALF_BITS))),
    )
    kv_group_size: int | None = option(
        "--kv-group-size",
        "int",
        "The KV cache quantization group size (32, 64 or 128; needs --kv-bits).",
        values=KV_GROUP_SIZES,
    )
    kv_quant_scheme: str | None = option(
        "--kv-quant-scheme",
        "str",
        "mlx-vlm: how the KV cache is quantized (needs --kv-bits; default uniform, turboquant for half bits).",
        choices=KV_QUANT_SCHEMES,
    )
    max_kv_size: int | None = option(
        "--max-kv-size",
        "int",
        "mlx-vlm: keep at most this many tokens in the KV cache (a rotating cache), and refuse longer requests.",
        minimum=1,
    )
    vision_cache_size: int | None = option(
        "--vision-cache-size",
        "int",
        "mlx-vlm: how many images' vision features to keep for reuse (default: mlx-vlm's, 20).",
        minimum=1,
    )
    prefix_cache_gb: float | None = option(
        "--prefix-cache-gb",
        "float",
        "mlx-vlm: turn its automatic prefix cache on, keeping up to this many GB of it on disk beside the "
        "server's receipt (0: in memory only).",
        minimum=0,
    )
    trust_remote_code: bool = option(
        "--trust-remote-code",
        "flag",
        "Refused: it would run Python code from the model's folder that no plan reviewed.",
        default=False,
    )
    hosts: tuple[str, ...] | None = option(
        "--hosts", "list", "mlx_lm: serve across these hosts' IPs (A,B,...; this machine first) with mlx.launch."
    )
    hostfile: str | None = option(
        "--hostfile",
        "str",
        "mlx_lm: serve across the hosts of this mlx.distributed_config hostfile (this machine first).",
        file_path="path",
    )
    backend: str = option(
        "--backend", "str", "A group's MLX distributed backend.", default="ring", choices=("ring", "jaccl")
    )
    pipeline: bool = option(
        "--pipeline",
        "flag",
        "A group runs the model as a pipeline of layers instead of tensor parallel.",
        default=False,
    )
    ring_port: int | None = option(
        "--ring-port", "int", "The first port of a ring group's own links, one per rank and IP (default 32323).", **PORT
    )
    max_tokens: int | None = option(
        "--max-tokens",
        "int",
        "The reply limit of a request that sets none (default: what the context window leaves after the prompt).",
        minimum=1,
    )
    max_tokens_ceiling: int | None = option(
        "--max-tokens-ceiling",
        "int",
        "The most a request may ask for (default: the model's context window less the prompt).",
        minimum=1,
    )
    decode_concurrency: int | None = option(
        "--decode-concurrency",
        "int",
        "mlx_lm: decode up to this many requests at once (default: mlx_lm's, 32); the front holds the rest.",
        minimum=1,
    )
    reasoning_budget: int | None = option(
        "--reasoning-budget",
        "int",
        f"mlx_lm: close a thinking model's thinking after this many tokens (default {REASONING_BUDGET}: no budget).",
        minimum=0,
    )
    hedge_limit: int | None = option(
        "--hedge-limit",
        "int",
        f"mlx_lm: cut a reply second-guessing itself this many times in its last 1024 tokens (default {HEDGE_LIMIT}; "
        "0 off).",
        minimum=0,
    )
    repeat_limit: int | None = option(
        "--repeat-limit",
        "int",
        f"mlx_lm: cut a reply ending with the same run written this many times in a row (default {REPEAT_LIMIT}; "
        "0 off).",
        minimum=0,
    )
    limit_answers: bool = option(
        "--limit-answers",
        "flag",
        "mlx_lm: watch answers for hedges and repeats too, not only the thinking.",
        default=False,
    )
    idle_timeout: float | None = option(
        "--idle-timeout", "float", "JIT: unload after this many idle seconds (0 disables).", minimum=0
    )
    keep_loaded: bool | None = option(
        "--keep-loaded", "flag", "JIT: never unload after use (manual unload still works)."
    )
    preload: bool | None = option(
        "--preload", "flag", "JIT: load this model when the front starts (default: without --jit).", scope="file"
    )


class ServeRequest(ModelRequest, ReceiptsRecord):
    """``serve start``: the server to plan, before any file is read; without ``--models``, its one model."""

    models: str | None = option(
        "--models", "str", "A TOML file of [[model]] tables: serve them all on one port, routed by 'model'."
    )
    port: int | None = option("--port", "int", "Loopback port (default: the runtime's, 8080 for mlx_lm).", **PORT)
    ready_timeout: float = option(
        "--ready-timeout",
        "float",
        "Seconds to wait for the model to load and answer.",
        default=DEFAULT_READY_TIMEOUT,
        minimum=0,
        min_open=True,
    )
    jit: bool = option("--jit", "flag", "Load the model on the first request, and allow unloading it.", default=False)
    min_headroom_gb: float | None = option(
        "--min-headroom-gb",
        "float",
        "Refuse a cold load, or a request's KV cache, unless this many GB stay free beyond its estimate.",
        minimum=0,
    )
    max_loaded: int | None = option(
        "--max-loaded",
        "int",
        "At most this many models loaded at once; the least recently used idle one makes room.",
        minimum=1,
    )
    max_queue: int = option(
        "--max-queue",
        "int",
        "Per model: while this many requests wait for its worker (a load, a busy worker), refuse more (503).",
        default=MAX_QUEUE,
        minimum=1,
    )
    stall_timeout: float = option(
        "--stall-timeout",
        "float",
        "A model whose running requests get nothing from its worker for this many seconds is wedged: replaced.",
        default=STALL_TIMEOUT_S,
        minimum=0,
        min_open=True,
    )
    api_key_file: str | None = option(
        "--api-key-file", "str", "Require one of the keys in this file (0600, one per line)."
    )
    log_prompts: bool = option(
        "--log-prompts", "flag", "Put each request's prompt text in the front's request lines.", default=False
    )
    launchd: bool = option(
        "--launchd", "flag", "Install a launchd agent (macOS) that starts the server at login.", default=False
    )
    systemd: bool = option(
        "--systemd", "flag", "Install a systemd user unit (Linux) that starts the server at login.", default=False
    )
    unit_dir: str | None = option(
        "--unit-dir", "str", "Directory for the unit (default ~/Library/LaunchAgents or ~/.config/systemd/user)."
    )
    restart: str = option(
        "--restart",
        "str",
        "When launchd/systemd restarts the server.",
        default="on-failure",
        choices=("on-failure", "always", "never"),
    )

    @property
    def supervisor(self) -> str:
        """Return who keeps the server running: ``mlx-agent``, ``launchd`` or ``systemd`` (both: refused)."""
        return ",".join(k for k in ("launchd", "systemd") if getattr(self, k)) or "mlx-agent"

    def model(self) -> ModelRequest:
        """Return the one model a ``serve start`` without a models file asks for."""
        return ModelRequest(**{opt.dest: getattr(self, opt.dest) for opt in ModelRequest.OPTIONS})


class StatusRequest(ReceiptsRecord):
    """``serve status``."""

    port: int | None = option("--port", "int", "Only this port.", **PORT)
    verify: bool = option(
        "--verify", "flag", "Re-hash bound adapter files (verified, changed or missing).", default=False
    )


class StopRequest(ReceiptsRecord):
    """``serve stop``."""

    port: int = option("--port", "int", "Port of the server to stop.", required=True, **PORT)
    uninstall: bool = option(
        "--uninstall", "flag", "Also remove a launchd/systemd unit file and its receipt.", default=False
    )


class ControlRecord(ReceiptsRecord):
    """A command that talks to a live front's control endpoint."""

    port: int = option("--port", "int", "Port of the server.", required=True, **PORT)
    expected_pid: int = option(
        "--expected-pid", "int", "The front's pid, as `serve status` shows it.", minimum=1, required=True
    )


class UnloadRequest(ControlRecord):
    """``serve unload``."""

    model: str | None = option("--model", "str", "Only this model (a served name or alias; default: every model).")


class PolicyRequest(ControlRecord):
    """``serve policy``: the whole policy, replaced."""

    idle_timeout: float | None = option(
        "--idle-timeout", "float", "Unload after this many idle seconds (omitted or 0: never).", minimum=0
    )
    keep_loaded: bool = option(
        "--keep-loaded", "flag", "Never unload after use (omitted: idle unload applies).", default=False
    )
    min_headroom_gb: float | None = option(
        "--min-headroom-gb", "float", "Memory reserve for cold loads (omitted: no check).", minimum=0
    )
    model: str | None = option(
        "--model", "str", "Apply the idle part to this model only (default: every model); the reserve is the front's."
    )


class LogsRequest(ReceiptsRecord):
    """``serve logs``: the front's and its workers' logs."""

    port: int = option("--port", "int", "Port of the server.", required=True, **PORT)
    model: str | None = option("--model", "str", "Only this model: its worker's log and its request lines.")
    follow: bool = option("--follow", "flag", "Keep printing lines as they are written (Ctrl-C stops).", default=False)
    lines: int = option(
        "--lines", "int", "How many of the last lines of each log to print first.", default=50, minimum=0
    )


class TrainRequest(ReceiptsRecord):
    """``lora train``: the training to plan, before any file is read."""

    path: str | None = option("--path", "str", "Absolute path of the local base model directory.")
    repo: str | None = option("--repo", "str", "ORG/NAME of a base model already in the Hugging Face cache.")
    data: str = option("--data", "str", "Local directory with train.jsonl (and valid.jsonl).", required=True)
    adapter_path: str = option(
        "--adapter-path", "str", "Directory the adapter is written to; absent or empty.", required=True
    )
    iters: int = option("--iters", "int", "Training iterations.", default=train.DEFAULT_ITERS, minimum=1)
    batch_size: int = option("--batch-size", "int", "Minibatch size.", default=train.DEFAULT_BATCH_SIZE, minimum=1)
    learning_rate: float = option(
        "--learning-rate", "float", "Adam learning rate.", default=train.DEFAULT_LEARNING_RATE, minimum=0, min_open=True
    )
    num_layers: int = option(
        "--num-layers",
        "int",
        "Layers to adapt, counted from the top; -1 for all.",
        default=train.DEFAULT_NUM_LAYERS,
        minimum=-1,
    )
    rank: int = option("--rank", "int", "LoRA rank.", default=train.DEFAULT_RANK, minimum=1)
    scale: float = option("--scale", "float", "LoRA scale.", default=train.DEFAULT_SCALE, minimum=0, min_open=True)
    dropout: float = option(
        "--dropout", "float", "LoRA dropout, in [0, 1).", default=train.DEFAULT_DROPOUT, minimum=0, maximum=1
    )
    fine_tune_type: str = option(
        "--fine-tune-type", "str", "Adapter kind.", default=train.DEFAULT_FINE_TUNE_TYPE, choices=train.FINE_TUNE_TYPES
    )
    max_seq_length: int = option(
        "--max-seq-length",
        "int",
        "Longest sequence; longer ones are truncated.",
        default=train.DEFAULT_MAX_SEQ_LENGTH,
        minimum=1,
    )
    seed: int = option("--seed", "int", "Random seed.", default=train.DEFAULT_SEED, minimum=0)
    steps_per_report: int = option(
        "--steps-per-report",
        "int",
        "Iterations between train loss reports.",
        default=train.DEFAULT_STEPS_PER_REPORT,
        minimum=1,
    )
    steps_per_eval: int = option(
        "--steps-per-eval", "int", "Iterations between validations.", default=train.DEFAULT_STEPS_PER_EVAL, minimum=1
    )
    val_batches: int = option(
        "--val-batches",
        "int",
        "Validation batches; -1 for the whole set, 0 for none.",
        default=train.DEFAULT_VAL_BATCHES,
        minimum=-1,
    )
    save_every: int = option(
        "--save-every",
        "int",
        "Iterations between checkpoints in the adapter directory.",
        default=train.DEFAULT_SAVE_EVERY,
        minimum=1,
    )
    mask_prompt: bool = option(
        "--mask-prompt", "flag", "Leave the prompt out of the loss (prompt/completion or chat data).", default=False
    )


class TrainStatusRequest(ReceiptsRecord):
    """``lora status``."""

    receipt: str | None = option("--receipt", "str", "Only this training receipt file.")


class Command:
    """A command's record and its own flags (``--json``, and ``--confirm --preview-hash`` when it has two steps)."""

    __slots__ = ("flags", "record")

    def __init__(self, record: type[Record], *, two_step: bool = False) -> None:
        self.record = record
        self.flags = (CONFIRM, PREVIEW_HASH, JSON) if two_step else (JSON,)

    @property
    def options(self) -> tuple[Opt, ...]:
        """Return every option the command line accepts: the record's (not those of a file only), then its own."""
        return (*(opt for opt in self.record.OPTIONS if opt.scope != "file"), *self.flags)

    def parse(self, values: dict[str, Any]) -> tuple[Record, dict[str, Any]]:
        """Split parsed option values into the record and the command's own flags; none may be left over."""
        values = dict(values)
        flags = {opt.dest: values.pop(opt.dest, opt.default) for opt in self.flags}
        return self.record(**values), flags


COMMANDS: dict[tuple[str, str], Command] = {
    ("serve", "start"): Command(ServeRequest, two_step=True),
    ("serve", "status"): Command(StatusRequest),
    ("serve", "stop"): Command(StopRequest),
    ("serve", "unload"): Command(UnloadRequest),
    ("serve", "policy"): Command(PolicyRequest),
    ("serve", "logs"): Command(LogsRequest),
    ("lora", "train"): Command(TrainRequest, two_step=True),
    ("lora", "status"): Command(TrainStatusRequest),
}
