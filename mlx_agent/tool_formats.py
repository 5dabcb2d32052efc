"""Which tool-call parser reads a chat template's calls: the one declaration the plan and the worker share.

mlx_lm picks a model's parser in ``tokenizer_utils._infer_tool_parser`` from markers in the chat template (then
from the vocabulary); mlx-agent adds parsers for families mlx_lm 0.32 cannot read, chosen the same way, after
mlx_lm's own choice found none. The worker installs ours through that seam (``runtime/reply/family_parsers``);
the plan predicts the choice from the template alone, without importing mlx_lm (seconds). A seam test holds the
mirror below to mlx_lm's own function on every template of the test corpus.

Stdlib only: the plan (CLI process) and the worker both read it.
"""

from __future__ import annotations

# One rule: the parser is chosen when every marker of any one alternative is in the template.
Rule = tuple[tuple[tuple[str, ...], ...], str]

# mlx_lm 0.32's own order (tokenizer_utils._infer_tool_parser), template markers only.
MLX_LM_RULES: tuple[Rule, ...] = (
    ((("<minimax:tool_call>",),), "minimax_m2"),
    ((("<|tool_call>", "<tool_call|>"),), "gemma4"),
    ((("<start_function_call>",),), "function_gemma"),
    ((("<longcat_tool_call>",),), "longcat"),
    ((("<arg_key>",),), "glm47"),
    ((("<|tool_list_start|>",), ("<|tool_call_start|>",)), "pythonic"),
    ((("<tool_call>\\n<function=",), ("<tool_call>\n<function=",)), "qwen3_coder"),
    ((("<|tool_calls_section_begin|>",),), "kimi_k2"),
    ((('<function name="', '<param name="'),), "minicpm5"),
    ((("[TOOL_CALLS]",),), "mistral"),
    ((("<atem:function_calls>",),), "muse_spark"),
    ((("<tool_call>", "tool_call.name"),), "json_tools"),
)

# Ours, tried when mlx_lm's rules find none: module name under mlx_lm.tool_parsers -> the markers that pick it.
OUR_RULES: tuple[Rule, ...] = (
    ((("<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>"),), "deepseek_v3"),  # noqa: RUF001  (DeepSeek's own tokens)
    ((('"parameters"', "<|python_tag|>"), ('"parameters"', "dictionary of argument name")), "llama3_json"),
)
OUR_PARSERS: tuple[str, ...] = tuple(name for _, name in OUR_RULES)


def _first(rules: tuple[Rule, ...], template: str) -> str | None:
    for alternatives, name in rules:
        if any(all(marker in template for marker in markers) for markers in alternatives):
            return name
    return None


def mlx_lm_parser_for(template: str) -> str | None:
    """Return the parser mlx_lm's own selection picks from the template's text, or None."""
    return _first(MLX_LM_RULES, template)


def our_parser_for(template: str) -> str | None:
    """Return the parser of ours that reads this template's calls, or None."""
    return _first(OUR_RULES, template)


def parser_for(template: str | None) -> str | None:
    """Return the parser the worker will use for a model with this chat template (mlx_lm's first, then ours)."""
    if not template:
        return None
    return mlx_lm_parser_for(template) or our_parser_for(template)
