"""What a plan is asked for one model, before any file is read, and the checks of its options against each other.

A ``ModelSpec`` comes from the ``serve start`` options (``serve_plan.model_spec``) or from one ``[[model]]``
table of a models file (``models_file.model_specs``); it is a plain class, cheap to import.
"""

from __future__ import annotations

from mlx_agent.errors import InvalidArguments
from mlx_agent.plan.recipes import AUTO

# What MLX's quantization accepts for a KV cache (mx.quantize bits and group sizes).
KV_BITS = (2, 3, 4, 5, 6, 8)
KV_GROUP_SIZES = (32, 64, 128)


class ModelSpec:
    """What a plan is asked for one model, before any file is read (a plain class, cheap to import)."""

    __slots__ = (
        "adapter_path",
        "alias",
        "backend",
        "chat_template_args",
        "draft_model",
        "hostfile",
        "hosts",
        "idle_timeout",
        "keep_loaded",
        "kv_bits",
        "kv_group_size",
        "m5_prefill",
        "max_tokens",
        "max_tokens_ceiling",
        "num_draft_tokens",
        "path",
        "pipeline",
        "preload",
        "prompt_cache_disk_gb",
        "prompt_lookup",
        "repo",
        "ring_port",
        "runtime",
        "runtime_executable",
        "served_model_name",
        "thinking",
        "training_receipt",
        "verify_weights",
    )

    def __init__(
        self,
        *,
        path: str | None = None,
        repo: str | None = None,
        training_receipt: str | None = None,
        adapter_path: str | None = None,
        runtime: str = "mlx_lm",
        runtime_executable: str | None = None,
        served_model_name: str | None = None,
        alias: tuple[str, ...] = (),
        thinking: str | None = None,
        chat_template_args: str | None = None,
        prompt_lookup: bool = False,
        m5_prefill: bool = False,
        draft_model: str | None = None,
        num_draft_tokens: int | None = None,
        kv_bits: int | None = None,
        kv_group_size: int | None = None,
        hosts: str | None = None,
        hostfile: str | None = None,
        backend: str = "ring",
        pipeline: bool = False,
        ring_port: int | None = None,
        max_tokens: int = 512,
        max_tokens_ceiling: int | None = None,
        idle_timeout: float = 0,
        keep_loaded: bool = False,
        preload: bool = True,
        verify_weights: bool = False,
        prompt_cache_disk_gb: float = 0,
    ) -> None:
        self.path = path
        self.repo = repo
        self.training_receipt = training_receipt  # selects base and adapter together
        self.adapter_path = adapter_path
        self.runtime = runtime
        self.runtime_executable = runtime_executable
        self.served_model_name = served_model_name
        self.alias = alias
        self.thinking = thinking  # None keeps the template's own default; "on" or "off"
        self.chat_template_args = chat_template_args  # a JSON object, as given on the command line
        self.prompt_lookup = prompt_lookup
        self.m5_prefill = m5_prefill
        self.draft_model = draft_model  # a path or a cached ORG/NAME, bound like the base model
        self.num_draft_tokens = num_draft_tokens
        self.kv_bits = kv_bits
        self.kv_group_size = kv_group_size
        self.hosts = hosts  # a group: --hosts A,B or --hostfile FILE (plan/group.py)
        self.hostfile = hostfile
        self.backend = backend
        self.pipeline = pipeline
        self.ring_port = ring_port
        self.max_tokens = max_tokens
        self.max_tokens_ceiling = max_tokens_ceiling
        self.idle_timeout = idle_timeout
        self.keep_loaded = keep_loaded
        self.preload = preload
        self.prompt_cache_disk_gb = prompt_cache_disk_gb  # 0: no prompt cache kept across unloads
        self.verify_weights = verify_weights  # hash weights in full: digests bound and rechecked at every load


def validate_spec(spec: ModelSpec) -> None:
    """Refuse a model spec whose options contradict each other, before any file is read."""
    if spec.training_receipt is not None:
        if spec.path is not None or spec.repo is not None or spec.adapter_path is not None:
            raise InvalidArguments(
                "--training-receipt selects the base model and adapter itself; "
                "do not combine it with --path, --repo or --adapter-path"
            )
    elif (spec.path is None) == (spec.repo is None):
        raise InvalidArguments("give exactly one of --path or --repo (or --training-receipt)")
    if spec.max_tokens < 1:
        raise InvalidArguments("--max-tokens must be at least 1", details={"max_tokens": spec.max_tokens})
    if spec.max_tokens_ceiling is not None and spec.max_tokens_ceiling < spec.max_tokens:
        raise InvalidArguments(
            "--max-tokens-ceiling must be at least --max-tokens",
            details={"max_tokens": spec.max_tokens, "max_tokens_ceiling": spec.max_tokens_ceiling},
        )
    if spec.thinking not in (None, "on", "off"):
        raise InvalidArguments("--thinking must be on or off", details={"thinking": spec.thinking})
    if spec.runtime == AUTO and spec.runtime_executable is not None:
        raise InvalidArguments("--runtime-executable needs an explicit --runtime naming what it provides")
    if spec.served_model_name is not None and not spec.served_model_name.strip():
        raise InvalidArguments("--served-model-name must not be empty")
    for pattern in spec.alias:
        if not pattern.strip():
            raise InvalidArguments("--alias must not be empty")
    if spec.num_draft_tokens is not None and spec.draft_model is None:
        raise InvalidArguments("--num-draft-tokens needs --draft-model")
    if spec.kv_bits is not None and spec.kv_bits not in KV_BITS:
        raise InvalidArguments(
            f"--kv-bits must be one of {', '.join(map(str, KV_BITS))}", details={"kv_bits": spec.kv_bits}
        )
    if spec.kv_group_size is not None and (spec.kv_bits is None or spec.kv_group_size not in KV_GROUP_SIZES):
        raise InvalidArguments(
            f"--kv-group-size must be one of {', '.join(map(str, KV_GROUP_SIZES))}, with --kv-bits",
            details={"kv_group_size": spec.kv_group_size},
        )
