"""The options of each command, as plain data that both Click and the fast path read.

Keeping one table means the click-free fast path (see ``fast.py``) can never accept an option or a
default that the full CLI does not.
"""

from __future__ import annotations

from mlx_agent.plan import training_defaults as train
from mlx_agent.plan.defaults import DEFAULT_MAX_TOKENS, DEFAULT_READY_TIMEOUT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Opt:
    """One command-line option (a plain class: dataclasses would import inspect on every fast call)."""

    __slots__ = ("choices", "choices_from", "default", "dest", "flag", "help", "kind", "maximum", "min_open",
                 "minimum", "required")

    def __init__(self, flag: str, dest: str, kind: str, help: str, *, default: Any = None,
                 minimum: float | None = None, maximum: float | None = None, min_open: bool = False,
                 required: bool = False, choices: tuple[str, ...] | None = None,
                 choices_from: str | None = None) -> None:
        self.flag = flag
        self.dest = dest
        self.kind = kind  # "str", "int", "float" or "flag"
        self.help = help
        self.default = default
        self.minimum = minimum
        self.maximum = maximum
        self.min_open = min_open
        self.required = required
        self.choices = choices
        self.choices_from = choices_from  # a function of plan.recipes returning the allowed values


PORT_HELP = "Loopback port (default: the runtime's, 8080 for mlx_lm)."
JSON = Opt("--json", "as_json", "flag", "Print one JSON envelope on stdout.", default=False)
RECEIPTS_DIR = Opt("--receipts-dir", "receipts_dir", "str",
                   "Base directory of receipts (default: $MLX_AGENT_HOME/receipts).")

SERVE_START = (
    Opt("--path", "path", "str", "Absolute path of a local model directory."),
    Opt("--repo", "repo", "str", "ORG/NAME of a model already in the Hugging Face cache."),
    Opt("--runtime", "runtime", "str", "Runtime to serve with; auto reads the model's config.json.",
        default="mlx_lm", choices_from="runtime_choices"),
    Opt("--runtime-executable", "runtime_executable", "str",
        "Absolute path of a runtime installed in another environment."),
    Opt("--port", "port", "int", PORT_HELP, minimum=1, maximum=65535),
    Opt("--max-tokens", "max_tokens", "int", "Default reply limit of the server.", default=DEFAULT_MAX_TOKENS,
        minimum=1),
    Opt("--ready-timeout", "ready_timeout", "float", "Seconds to wait for the model to load and answer.",
        default=DEFAULT_READY_TIMEOUT, minimum=0, min_open=True),
    Opt("--training-receipt", "training_receipt", "str",
        "A completed `lora train` receipt: serves its pinned base model with its adapter."),
    Opt("--adapter-path", "adapter_path", "str",
        "A local LoRA adapter directory (mlx_lm), bound by the content of its two files."),
    Opt("--thinking", "thinking", "str", "Ask the chat template to think (on) or not (off); default: the template's.",
        choices=("on", "off")),
    Opt("--chat-template-args", "chat_template_args", "str",
        "A JSON object of chat template arguments (mlx_lm), merged with --thinking."),
    Opt("--prompt-lookup", "prompt_lookup", "flag",
        "mlx_lm: draft greedy replies from the prompt and verify them (code edits); native batching otherwise.",
        default=False),
    Opt("--m5-prefill", "m5_prefill", "flag",
        "mlx_lm: the experimental M5 Q4 prompt kernel for eligible Qwen2 models; native MLX elsewhere.",
        default=False),
    Opt("--jit", "jit", "flag", "Run a gateway that loads the model on the first request and can unload it.",
        default=False),
    Opt("--idle-timeout", "idle_timeout", "float", "JIT: unload after this many idle seconds (0 disables).",
        minimum=0),
    Opt("--keep-loaded", "keep_loaded", "flag", "JIT: never unload after use (manual unload still works).",
        default=False),
    Opt("--min-headroom-gb", "min_headroom_gb", "float",
        "JIT: refuse a cold load unless this many GB stay free beyond the model's estimate.", minimum=0),
    Opt("--api-key-file", "api_key_file", "str", "JIT: require one of the keys in this file (one per line)."),
    Opt("--launchd", "launchd", "flag", "Install a launchd agent (macOS) that starts the server at login.",
        default=False),
    Opt("--systemd", "systemd", "flag", "Install a systemd user unit (Linux) that starts the server at login.",
        default=False),
    Opt("--unit-dir", "unit_dir", "str",
        "Directory for the unit (default ~/Library/LaunchAgents or ~/.config/systemd/user)."),
    Opt("--restart", "restart", "str", "When launchd/systemd restarts the server.", default="on-failure",
        choices=("on-failure", "always", "never")),
    Opt("--confirm", "confirm", "flag", "Launch the plan whose hash is given with --preview-hash.", default=False),
    Opt("--preview-hash", "preview_hash", "str", "The preview_hash of the reviewed plan."),
    RECEIPTS_DIR,
    JSON,
)
SERVE_STATUS = (
    Opt("--port", "port", "int", "Only this port.", minimum=1, maximum=65535),
    Opt("--verify", "verify", "flag", "Re-hash bound adapter files (verified, changed or missing).", default=False),
    RECEIPTS_DIR,
    JSON,
)
SERVE_STOP = (
    Opt("--port", "port", "int", "Port of the server to stop.", minimum=1, maximum=65535, required=True),
    Opt("--uninstall", "uninstall", "flag", "Also remove a launchd/systemd unit file and its receipt.",
        default=False),
    RECEIPTS_DIR,
    JSON,
)

EXPECTED_PID = Opt("--expected-pid", "expected_pid", "int", "The gateway's pid, as `serve status` shows it.",
                   minimum=1, required=True)
SERVE_UNLOAD = (
    Opt("--port", "port", "int", "Port of the JIT gateway.", minimum=1, maximum=65535, required=True),
    EXPECTED_PID,
    RECEIPTS_DIR,
    JSON,
)
SERVE_POLICY = (
    Opt("--port", "port", "int", "Port of the JIT gateway.", minimum=1, maximum=65535, required=True),
    EXPECTED_PID,
    Opt("--idle-timeout", "idle_timeout", "float", "Unload after this many idle seconds (omitted or 0: never).",
        minimum=0),
    Opt("--keep-loaded", "keep_loaded", "flag", "Never unload after use (omitted: idle unload applies).",
        default=False),
    Opt("--min-headroom-gb", "min_headroom_gb", "float", "Memory reserve for cold loads (omitted: no check).",
        minimum=0),
    RECEIPTS_DIR,
    JSON,
)

LORA_TRAIN = (
    Opt("--path", "path", "str", "Absolute path of the local base model directory."),
    Opt("--repo", "repo", "str", "ORG/NAME of a base model already in the Hugging Face cache."),
    Opt("--data", "data", "str", "Local directory with train.jsonl (and valid.jsonl).", required=True),
    Opt("--training-receipt", "training_receipt", "str",
        "A completed `lora train` receipt: serves its pinned base model with its adapter."),
    Opt("--adapter-path", "adapter_path", "str", "Directory the adapter is written to; absent or empty.",
        required=True),
    Opt("--iters", "iters", "int", "Training iterations.", default=train.DEFAULT_ITERS, minimum=1),
    Opt("--batch-size", "batch_size", "int", "Minibatch size.", default=train.DEFAULT_BATCH_SIZE, minimum=1),
    Opt("--learning-rate", "learning_rate", "float", "Adam learning rate.", default=train.DEFAULT_LEARNING_RATE,
        minimum=0, min_open=True),
    Opt("--num-layers", "num_layers", "int", "Layers to adapt, counted from the top; -1 for all.",
        default=train.DEFAULT_NUM_LAYERS, minimum=-1),
    Opt("--rank", "rank", "int", "LoRA rank.", default=train.DEFAULT_RANK, minimum=1),
    Opt("--scale", "scale", "float", "LoRA scale.", default=train.DEFAULT_SCALE, minimum=0, min_open=True),
    Opt("--dropout", "dropout", "float", "LoRA dropout, in [0, 1).", default=train.DEFAULT_DROPOUT, minimum=0,
        maximum=1),
    Opt("--fine-tune-type", "fine_tune_type", "str", "Adapter kind.", default=train.DEFAULT_FINE_TUNE_TYPE,
        choices=train.FINE_TUNE_TYPES),
    Opt("--max-seq-length", "max_seq_length", "int", "Longest sequence; longer ones are truncated.",
        default=train.DEFAULT_MAX_SEQ_LENGTH, minimum=1),
    Opt("--seed", "seed", "int", "Random seed.", default=train.DEFAULT_SEED, minimum=0),
    Opt("--steps-per-report", "steps_per_report", "int", "Iterations between train loss reports.",
        default=train.DEFAULT_STEPS_PER_REPORT, minimum=1),
    Opt("--steps-per-eval", "steps_per_eval", "int", "Iterations between validations.",
        default=train.DEFAULT_STEPS_PER_EVAL, minimum=1),
    Opt("--val-batches", "val_batches", "int", "Validation batches; -1 for the whole set, 0 for none.",
        default=train.DEFAULT_VAL_BATCHES, minimum=-1),
    Opt("--save-every", "save_every", "int", "Iterations between checkpoints in the adapter directory.",
        default=train.DEFAULT_SAVE_EVERY, minimum=1),
    Opt("--mask-prompt", "mask_prompt", "flag", "Leave the prompt out of the loss (prompt/completion or chat data).",
        default=False),
    Opt("--confirm", "confirm", "flag", "Start the plan whose hash is given with --preview-hash.", default=False),
    Opt("--preview-hash", "preview_hash", "str", "The preview_hash of the reviewed plan."),
    RECEIPTS_DIR,
    JSON,
)
LORA_STATUS = (
    Opt("--receipt", "receipt", "str", "Only this training receipt file."),
    RECEIPTS_DIR,
    JSON,
)

COMMANDS: dict[tuple[str, str], tuple[Opt, ...]] = {
    ("serve", "start"): SERVE_START,
    ("serve", "status"): SERVE_STATUS,
    ("serve", "stop"): SERVE_STOP,
    ("serve", "unload"): SERVE_UNLOAD,
    ("serve", "policy"): SERVE_POLICY,
    ("lora", "train"): LORA_TRAIN,
    ("lora", "status"): LORA_STATUS,
}


def choices(opt: Opt) -> list[str] | None:
    """Return the allowed values of an option, if it has a fixed set."""
    if opt.choices is not None:
        return list(opt.choices)
    if opt.choices_from is None:
        return None
    from mlx_agent.plan import recipes

    values: list[str] = getattr(recipes, opt.choices_from)()
    return values
