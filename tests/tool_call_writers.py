"""How each family's models write tool calls: its chat template's own rendering of an assistant's calls.

One function per call syntax (``tests/tool_call_cases.py`` names which family writes which), and the special
tokens each family's checkpoint has (its tool-call and thinking markers, as the tokenizer's added tokens).
No tests here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Arguments = dict[str, Any]


@dataclass(frozen=True)
class Call:
    """A call the model means: the tool's name, its arguments, and the id it writes (if its format has one)."""

    name: str
    arguments: Arguments
    id: str | None = None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _text(value: Any) -> str:
    """Write a value as the XML-like templates do: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else _json(value)


def json_tools(calls: Sequence[Call]) -> str:
    """Hermes, Qwen2.5, QwQ, Qwen3: ``{"name": ..., "arguments": ...}`` on its own line in ``<tool_call>`` per call."""
    return "\n".join(
        "<tool_call>\n" + _json({"name": c.name, "arguments": c.arguments}) + "\n</tool_call>" for c in calls
    )


def qwen3_coder(calls: Sequence[Call]) -> str:
    """Qwen3-Coder, Qwen3.5: ``<function=NAME>``, one ``<parameter=KEY>`` per argument, the value on its own lines."""
    return "\n".join(
        "<tool_call>\n<function="
        + c.name
        + ">\n"
        + "".join(f"<parameter={k}>\n{_text(v)}\n</parameter>\n" for k, v in c.arguments.items())
        + "</function>\n</tool_call>"
        for c in calls
    )


def llama3(calls: Sequence[Call]) -> str:
    """Llama 3.x: ``{"name": NAME, "parameters": {...}}`` (the template's own words), more than one by ``; ``."""
    return "; ".join('{"name": "' + c.name + '", "parameters": ' + json.dumps(c.arguments) + "}" for c in calls)


def mistral_json(calls: Sequence[Call]) -> str:
    """Mistral Nemo: ``[TOOL_CALLS]`` and one JSON list of calls, each with its 9-character id."""
    listed = [{"name": c.name, "arguments": c.arguments, "id": c.id or f"{i:09d}"} for i, c in enumerate(calls)]
    return "[TOOL_CALLS]" + _json(listed)


def mistral_call_id(calls: Sequence[Call]) -> str:
    """Mistral Small 3.2: ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` per call."""
    return "".join(
        f"[TOOL_CALLS]{c.name}[CALL_ID]{c.id or f'{i:09d}'}[ARGS]{_json(c.arguments)}" for i, c in enumerate(calls)
    )


def devstral(calls: Sequence[Call]) -> str:
    """Devstral: ``[TOOL_CALLS]NAME[ARGS]{...}`` per call."""
    return "".join(f"[TOOL_CALLS]{c.name}[ARGS]{_json(c.arguments)}" for c in calls)


def gemma4(calls: Sequence[Call]) -> str:
    """Gemma 4: ``<|tool_call>call:NAME{key:VALUE,...}<tool_call|>``, strings between ``<|"|>`` marks."""

    def value(v: Any, keys: bool) -> str:
        if isinstance(v, str):
            return '<|"|>' + v + '<|"|>'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):
            return "{" + ",".join(name(k, keys) + ":" + value(x, keys) for k, x in sorted(v.items())) + "}"
        if isinstance(v, list):
            return "[" + ",".join(value(x, keys) for x in v) + "]"
        return "null" if v is None else _json(v)

    def name(key: str, keys: bool) -> str:
        return key

    return "".join(
        "<|tool_call>call:"
        + c.name
        + "{"
        + ",".join(k + ":" + value(v, False) for k, v in sorted(c.arguments.items()))
        + "}<tool_call|>"
        for c in calls
    )


DS_BEGIN, DS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"  # noqa: RUF001  (DeepSeek's own tokens)
DS_CALL, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"  # noqa: RUF001


def deepseek_v31(calls: Sequence[Call]) -> str:
    """DeepSeek V3.1: ``NAME<｜tool▁sep｜>{json}`` per call inside the calls block."""  # noqa: RUF002
    return DS_BEGIN + "".join(f"{DS_CALL}{c.name}{DS_SEP}{_json(c.arguments)}{DS_CALL_END}" for c in calls) + DS_END


def deepseek_r1(calls: Sequence[Call]) -> str:
    """DeepSeek R1 distills: ``function<｜tool▁sep｜>NAME`` then the arguments in a json code block."""  # noqa: RUF002
    return (
        DS_BEGIN
        + "".join(f"{DS_CALL}function{DS_SEP}{c.name}\n```json\n{_json(c.arguments)}\n```{DS_CALL_END}" for c in calls)
        + DS_END
    )


def glm46(calls: Sequence[Call]) -> str:
    """GLM-4.6: ``<tool_call>NAME``, then each ``<arg_key>`` and ``<arg_value>`` pair on its own line."""
    return "".join(
        "\n<tool_call>"
        + c.name
        + "".join(f"\n<arg_key>{k}</arg_key>\n<arg_value>{_text(v)}</arg_value>" for k, v in c.arguments.items())
        + "\n</tool_call>"
        for c in calls
    )


def glm47(calls: Sequence[Call]) -> str:
    """GLM-4.7: as GLM-4.6 without the newlines between tags."""
    return "".join(
        "<tool_call>"
        + c.name
        + "".join(f"<arg_key>{k}</arg_key><arg_value>{_text(v)}</arg_value>" for k, v in c.arguments.items())
        + "</tool_call>"
        for c in calls
    )


def kimi_k2(calls: Sequence[Call]) -> str:
    """Kimi K2: ``<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{json}`` per call."""
    return (
        "<|tool_calls_section_begin|>"
        + "".join(
            f"<|tool_call_begin|>functions.{c.name}:{i}<|tool_call_argument_begin|>{_json(c.arguments)}<|tool_call_end|>"
            for i, c in enumerate(calls)
        )
        + "<|tool_calls_section_end|>"
    )


def minimax_m2(calls: Sequence[Call]) -> str:
    """MiniMax M2: ``<invoke name="NAME">`` with ``<parameter name="KEY">VALUE</parameter>`` lines."""
    return (
        "<minimax:tool_call>\n"
        + "".join(
            f'<invoke name="{c.name}">\n'
            + "".join(f'<parameter name="{k}">{_text(v)}</parameter>\n' for k, v in c.arguments.items())
            + "</invoke>\n"
            for c in calls
        )
        + "</minimax:tool_call>"
    )


def kimi_ids(calls: Sequence[Call]) -> tuple[Call, ...]:
    """Return ``calls`` with the ids Kimi K2's format writes (``functions.NAME:INDEX``)."""
    return tuple(Call(c.name, c.arguments, f"functions.{c.name}:{i}") for i, c in enumerate(calls))


QWEN = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>")
LLAMA = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>")
MISTRAL = ("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]")
MISTRAL_ARGS = (*MISTRAL, "[ARGS]", "[CALL_ID]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[SYSTEM_PROMPT]")
DEEPSEEK = (DS_BEGIN, DS_END, DS_CALL, DS_CALL_END, DS_SEP, "<think>", "</think>")
GLM = ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<tool_call>")
GLM_ALL = (*GLM, "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<think>", "</think>")
KIMI = ("<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "<think>", "</think>")
KIMI_CALLS = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_end|>")
KIMI_ALL = (*KIMI, *KIMI_CALLS, "<|tool_call_argument_begin|>")
GEMMA = ("<bos>", "<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>")
MINIMAX = ("]~!b[", "]~b]", "[e~[", "<minimax:tool_call>", "</minimax:tool_call>", "<think>", "</think>")
