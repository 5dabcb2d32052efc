"""Every name of mlx_lm the wrapped server depends on, checked at start-up and by tests/unit/test_seams.py.

The wrapper subclasses mlx_lm.server's ``APIHandler``, ``ResponseGenerator``, ``ToolCallFormatter``,
``TextStateMachine`` and ``CompletionRequest``, replaces its module-level ``run``, ``_make_logits_processors``,
``ToolCallFormatter`` and ``TextStateMachine`` (Harmony), wraps the value readers of mlx_lm's tool parsers
(``lenient_tools``), and reads a few tokenizer properties; with ``--prompt-lookup`` it also serves requests
itself through ``_serve_single`` with mlx_lm's prompt cache and KV cache helpers. pyproject.toml pins the tested range,
``mlx-lm>=0.32.2,<0.33`` (``SUPPORTED_MLX_LM``); a newer mlx_lm must pass these checks (and the e2e tests)
before the pin moves. A failed check stops the server before it listens, naming what changed.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
from typing import Any

from mlx_agent.errors import SeamChanged

SUPPORTED_MLX_LM = ">=0.32.2,<0.33"

# Callables of mlx_lm.server, with the parameters (in order, from the first) that we call or override.
SEAMS: dict[str, tuple[str, ...]] = {
    "main": (),
    "run": ("host", "port", "model_provider"),  # replaced; main() calls run(host, port, provider)
    "_run_http_server": ("host", "port", "response_generator", "server_class", "handler_class"),
    "_make_logits_processors": ("args",),  # wrapped: appends the reply watcher
    # built once in the handler thread first, so a request they refuse fails alone (generator._preflight)
    "_make_sampler": ("args", "tokenizer"),
    "make_logits_processors": (
        "logit_bias",
        "repetition_penalty",
        "repetition_context_size",
        "presence_penalty",
        "presence_context_size",
        "frequency_penalty",
        "frequency_context_size",
    ),
    "LRUPromptCache.__init__": ("self", "max_size"),
    "ModelProvider.load_default": ("self",),
    "ResponseGenerator.__init__": ("self", "model_provider", "prompt_cache"),
    "ResponseGenerator._tokenize": ("self", "tokenizer", "request", "args"),
    "ResponseGenerator.generate": ("self", "request", "generation_args", "progress_callback"),
    "ResponseGenerator.generation_available": ("self",),
    # --prompt-lookup: a marked request is not batchable, and _serve_single runs the lookup decoder for it
    "ResponseGenerator._is_batchable": ("self", "args"),
    "ResponseGenerator._serve_single": ("self", "request", "stream"),
    "ResponseGenerator._make_state_machine": ("self", "model_key", "tokenizer", "stop_words"),  # Harmony's machine
    "ResponseGenerator._log_cache_stats": ("self",),
    "LRUPromptCache.fetch_nearest_cache": ("self", "model", "tokens"),
    "LRUPromptCache.insert_cache": ("self", "model", "tokens", "prompt_cache"),
    "_image_parts": ("messages",),
    "APIHandler.__init__": ("self", "response_generator"),
    "APIHandler.do_POST": ("self",),
    "APIHandler.validate_model_parameters": ("self",),
    "APIHandler.handle_chat_completions": ("self",),
    "APIHandler.handle_text_completions": ("self",),
    "APIHandler.handle_completion": ("self", "request", "stop_words"),
    "APIHandler.generate_response": (
        "self",
        "text",
        "finish_reason",
        "prompt_token_count",
        "completion_token_count",
        "prompt_cache_count",
        "token_logprobs",
        "top_tokens",
        "tokens",
        "tool_calls",
    ),
    "APIHandler._set_completion_headers": ("self", "status_code"),
    # overridden: the streamed usage chunk takes the stream's object ("chat.completion.chunk")
    "APIHandler.completion_usage_response": (
        "self",
        "prompt_token_count",
        "completion_token_count",
        "prompt_cache_count",
    ),
    "ToolCallFormatter.__init__": ("self", "tool_parser", "tools", "streaming"),
    "ToolCallFormatter._format": ("self", "tc"),
    "GenerationContext.stop": ("self",),
    # Replaced by a subclass whose static steps also split Harmony states; the handler calls them on the class.
    "TextStateMachine.make_state": ("self", "initial"),
    "TextStateMachine.split": ("state", "text"),
    "TextStateMachine.flush": ("state",),
    "TextStateMachine.discard": ("state",),
    "load": ("path_or_hf_repo", "tokenizer_config", "model_config", "adapter_path", "lazy"),  # wrapped: progress
    "scan_cache_dir": ("cache_dir",),  # wrapped: a missing hub cache lists no repos instead of failing
}

# Dataclasses of mlx_lm.server, with the fields we read, build or replace.
DATACLASS_FIELDS: dict[str, tuple[str, ...]] = {
    "CompletionRequest": ("request_type", "prompt", "messages", "tools", "role_mapping"),
    "GenerationArguments": (
        "model",
        "sampling",
        "logits",
        "stop_words",
        "max_tokens",
        "logprobs",
        "top_logprobs",
        "seed",
        "chat_template_kwargs",
    ),
    "SamplingArguments": ("temperature",),
    "LogitsProcessorArguments": ("logit_bias", "repetition_penalty", "presence_penalty", "frequency_penalty"),
    "GenerationContext": (
        "has_tool_calling",
        "has_thinking",
        "tool_parser",
        "text_sm",
        "initial_state",
        "prompt",
        "prompt_cache_count",
    ),
    "ModelDescription": ("model", "draft", "adapter"),
    "Response": ("text", "token", "logprob", "finish_reason", "top_tokens"),
}

# Callables of other mlx_lm modules the prompt-lookup path uses, with the parameters it passes.
MODULE_SEAMS: dict[str, dict[str, tuple[str, ...]]] = {
    "mlx_lm.generate": {"wired_limit": ("model", "streams")},
    "mlx_lm.models.cache": {
        "make_prompt_cache": ("model",),
        "trim_prompt_cache": ("cache", "num_tokens"),
        "KVCache.trim": ("self", "n"),
        "KVCache.is_trimmable": ("self",),
    },
    # The tool parsers' value readers that lenient_tools wraps (it calls them with these parameters).
    "mlx_lm.tool_parsers.qwen3_coder": {"_convert_param_value": ("param_value", "param_name", "param_config")},
    "mlx_lm.tool_parsers.minimax_m2": {"_convert_param_value_with_types": ("value", "param_types")},
    "mlx_lm.tool_parsers.minicpm5": {"_convert_param_value_with_types": ("value", "param_types")},
    "mlx_lm.tool_parsers.glm47": {"_deserialize": ("value",)},
    "mlx_lm.tool_parsers.longcat": {"_deserialize": ("value",)},
    "mlx_lm.tool_parsers.muse_spark": {"_param_value": ("raw",)},
    "mlx_lm.tool_parsers.kimi_k3": {"_decode_value": ("value", "value_type")},
}

# Properties and methods of mlx_lm.tokenizer_utils.TokenizerWrapper we read.
TOKENIZER_ATTRIBUTES = (
    "apply_chat_template",
    "has_thinking",
    "think_start_tokens",
    "think_end_tokens",
    "eos_token_ids",
    "tool_call_start",
    "tool_call_end",
)


def _lookup(module: Any, dotted: str) -> Any:
    obj: Any = module
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise SeamChanged(f"{module.__name__}.{dotted} no longer exists")
    return obj


def check_seams() -> None:
    """Raise ``SeamChanged`` naming the first seam of mlx_lm that is missing or changed."""
    import mlx_lm.server as server
    import mlx_lm.tokenizer_utils as tokenizer_utils

    for dotted, params in SEAMS.items():
        names = list(inspect.signature(_lookup(server, dotted)).parameters)
        if names[: len(params)] != list(params):
            raise SeamChanged(f"mlx_lm.server.{dotted} now takes {names}, expected to start with {list(params)}")
    for name, wanted in DATACLASS_FIELDS.items():
        cls = _lookup(server, name)
        have = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        missing = [f for f in wanted if f not in have]
        if missing:
            raise SeamChanged(f"mlx_lm.server.{name} lost the fields {missing}")
    for attribute in TOKENIZER_ATTRIBUTES:
        _lookup(tokenizer_utils, f"TokenizerWrapper.{attribute}")
    for module_name, callables in MODULE_SEAMS.items():
        module = importlib.import_module(module_name)
        for dotted, params in callables.items():
            names = list(inspect.signature(_lookup(module, dotted)).parameters)
            if names[: len(params)] != list(params):
                raise SeamChanged(f"{module_name}.{dotted} now takes {names}, expected to start with {list(params)}")


def version_supported(version: str) -> bool:
    """Whether an mlx_lm version is inside the tested range."""
    from packaging.specifiers import SpecifierSet

    return version in SpecifierSet(SUPPORTED_MLX_LM)


def warn_if_untested() -> None:
    """Log a warning when the installed mlx_lm is outside the tested range (the seam checks still decide)."""
    import mlx_lm

    if not version_supported(mlx_lm.__version__):
        logging.getLogger(__name__).warning(
            "mlx-agent: mlx_lm %s is outside the tested range %s", mlx_lm.__version__, SUPPORTED_MLX_LM
        )
