"""Every name of mlx_lm the wrapped server depends on, checked at start-up and by tests/unit/test_seams.py.

The wrapper subclasses mlx_lm.server's ``APIHandler``, ``ResponseGenerator``, ``ToolCallFormatter``,
``TextStateMachine`` and ``CompletionRequest``, replaces its module-level ``run``, ``_make_logits_processors``,
``ToolCallFormatter`` and ``TextStateMachine`` (Harmony), wraps the value readers of mlx_lm's tool parsers
(``lenient_tools``), installs our tool-call parsers through ``tokenizer_utils._infer_tool_parser`` and fixes
mlx_lm's Mistral, GLM and MiniMax readers (``family_parsers``), and reads a few tokenizer properties; with
``--prompt-lookup`` it also serves requests itself through ``_serve_single`` with mlx_lm's prompt cache and KV
cache helpers. It replaces the batch generator
the generation loop builds (``BatchGenerator``, subclassed) and the loop's time slice (``chunked_prefill``).
pyproject.toml pins the tested range,
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
    "make_text_state_machine": ("tokenizer", "stop_words"),  # wrapped: family_parsers' extra call starts
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
    "sharded_load": ("repo", "pipeline_group", "tensor_group"),  # wrapped on a group's rank 0: progress
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
    "mlx_lm.tool_parsers.minimax_m2": {
        "_convert_param_value_with_types": ("value", "param_types"),
        "parse_tool_call": ("text", "tools"),  # wrapped by family_parsers, as the next ones
        "_extract_name": ("name_str",),
    },
    "mlx_lm.tool_parsers.minicpm5": {"_convert_param_value_with_types": ("value", "param_types")},
    "mlx_lm.tool_parsers.glm47": {"_deserialize": ("value",), "parse_tool_call": ("text", "tools")},
    "mlx_lm.tool_parsers.longcat": {"_deserialize": ("value",)},
    "mlx_lm.tool_parsers.muse_spark": {"_param_value": ("raw",)},
    "mlx_lm.tool_parsers.kimi_k3": {"_decode_value": ("value", "value_type")},
    "mlx_lm.tool_parsers.kimi_k2": {"parse_tool_call": ("text", "tools")},
    # family_parsers: the selection it wraps, the Mistral reader it replaces, the parsers whose strings it restores
    "mlx_lm.tokenizer_utils": {"_infer_tool_parser": ("tokenizer",), "load": ("model_path",)},
    "mlx_lm.tool_parsers.mistral": {"_parse_header_calls": ("text",), "parse_tool_call": ("text", "tools")},
}
# The patterns family_parsers reads a call's values with, by module (compiled patterns with one group or two).
PATTERNS: dict[str, tuple[str, ...]] = {
    "mlx_lm.tool_parsers.glm47": ("_func_arg_regex",),
    "mlx_lm.tool_parsers.minimax_m2": ("_invoke_complete_regex", "_parameter_complete_regex"),
}
# Names mlx_lm's tokenizer load must still use: it asks _infer_tool_parser, imports the module, reads its parts.
LOAD_USES = ("_infer_tool_parser", "import_module", "parse_tool_call", "tool_call_start", "tool_call_end")

# Chunked prefill (serving/chunked_prefill.py): the batch generator it subclasses, the members it calls or
# overrides, and the data it reads; the generation loop must still build ``BatchGenerator`` by its module name
# and slice its steps by ``_time_budget``, and lookup's choice still comes from ``_is_batchable``.
GENERATE_SEAMS: dict[str, tuple[str, ...]] = {
    "BatchGenerator.__init__": ("self", "model"),
    "BatchGenerator._next": ("self",),
    "BatchGenerator.extract_cache": ("self", "uids"),
    "BatchGenerator.remove": ("self", "uids", "return_prompt_caches"),
    "BatchGenerator.prompt_cache_nbytes": (),  # a property
}
# Names a function's code must still use (its ``co_names``): attributes and globals the patches rely on.
NAMES_USED: dict[str, dict[str, tuple[str, ...]]] = {
    "mlx_lm.server": {
        "ResponseGenerator.__init__": ("_time_budget", "requests", "_is_distributed"),
        "ResponseGenerator._generate": (
            "BatchGenerator",
            "_time_budget",
            "_is_batchable",
            "_serve_single",
            # a handed-over lookup reply enters the batch through these (lookup_serving.hand_over)
            "_tokenize",
            "_make_state_machine",
            "fetch_nearest_cache",
        ),
    },
    "mlx_lm.generate": {
        "BatchGenerator.__init__": (
            "model",
            "prefill_step_size",
            "completion_batch_size",
            "_unprocessed_sequences",
            "_generation_batch",
            "_counters",
        ),
        "BatchGenerator._next": ("_unprocessed_sequences", "_make_batch", "_generation_batch", "prefill_step_size"),
        "BatchGenerator._make_batch": ("_unprocessed_sequences", "popleft"),
        "BatchGenerator.prompt_cache_nbytes": ("_unprocessed_sequences",),
    },
}
# mlx_lm.generate's dataclasses: the prompt step's progress report we build.
GENERATE_FIELDS: dict[str, tuple[str, ...]] = {
    "PromptProcessingBatch.Response": ("uid", "progress", "end_of_segment", "end_of_prompt"),
    "BatchCounters": ("prompt_tokens", "prompt_time"),
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
    _check_generate_seams()
    for module_name, callables in MODULE_SEAMS.items():
        module = importlib.import_module(module_name)
        for dotted, params in callables.items():
            names = list(inspect.signature(_lookup(module, dotted)).parameters)
            if names[: len(params)] != list(params):
                raise SeamChanged(f"{module_name}.{dotted} now takes {names}, expected to start with {list(params)}")
    _check_parser_seams()


def _check_parser_seams() -> None:
    """Raise ``SeamChanged`` when what ``family_parsers`` relies on in mlx_lm's tool-call parsing changed."""
    for module_name, names in PATTERNS.items():
        module = importlib.import_module(module_name)
        for name in names:
            if not hasattr(getattr(module, name, None), "finditer"):
                raise SeamChanged(f"{module_name}.{name} is no longer a compiled pattern")
    tokenizer_utils = importlib.import_module("mlx_lm.tokenizer_utils")
    load = inspect.unwrap(tokenizer_utils.load)
    missing = [name for name in LOAD_USES if name not in load.__code__.co_names]
    if missing:
        raise SeamChanged(f"mlx_lm.tokenizer_utils.load no longer uses {missing}")
    if not isinstance(getattr(tokenizer_utils.TokenizerWrapper, "response_transitions", None), property):
        raise SeamChanged("mlx_lm.tokenizer_utils.TokenizerWrapper.response_transitions is no longer a property")
    server = importlib.import_module("mlx_lm.server")
    used = inspect.unwrap(server.make_text_state_machine).__code__.co_names
    if not {"response_transitions", "tool_call_start"} <= set(used):
        raise SeamChanged("mlx_lm.server.make_text_state_machine no longer reads response_transitions")
    mistral = importlib.import_module("mlx_lm.tool_parsers.mistral")
    if "_parse_header_calls" not in inspect.unwrap(mistral.parse_tool_call).__code__.co_names:
        raise SeamChanged("mlx_lm.tool_parsers.mistral.parse_tool_call no longer calls _parse_header_calls")


def _code(obj: Any) -> Any:
    """Return the code object of a function, or of a property's getter."""
    function: Any = obj.fget if isinstance(obj, property) else obj
    return function.__code__


def _check_generate_seams() -> None:
    """Raise ``SeamChanged`` when what chunked prefill relies on in mlx_lm changed."""
    generate = importlib.import_module("mlx_lm.generate")  # ``mlx_lm.generate`` the attribute is a function

    for dotted, params in GENERATE_SEAMS.items():
        found = _lookup(generate, dotted)
        if isinstance(found, property):
            continue
        names = list(inspect.signature(found).parameters)
        if names[: len(params)] != list(params):
            raise SeamChanged(f"mlx_lm.generate.{dotted} now takes {names}, expected to start with {list(params)}")
    for module_name, functions in NAMES_USED.items():
        module = importlib.import_module(module_name)
        for dotted, wanted in functions.items():
            missing = [name for name in wanted if name not in _code(_lookup(module, dotted)).co_names]
            if missing:
                raise SeamChanged(f"{module_name}.{dotted} no longer uses {missing}")
    for name, wanted in GENERATE_FIELDS.items():
        cls = _lookup(generate, name)
        have = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        lost = [f for f in wanted if f not in have]
        if lost:
            raise SeamChanged(f"mlx_lm.generate.{name} lost the fields {lost}")


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
