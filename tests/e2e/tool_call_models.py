"""The scripted models that answer every prompt with one ``json_tools`` call, and the tool they call (no tests here).

A random model never writes tool-call markup, so these are scripted (``wrapped_support.scripted_model``): right
after the generation prompt they write ``<tool_call>``, one fixed text, ``</tool_call>`` and stop. The tokenizer
names mlx_lm's ``json_tools`` parser. ``BROKEN`` is a call cut off mid-arguments, which that parser cannot read;
``WHOLE`` is one it reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.wrapped_support import scripted_model

BROKEN = '{"name": "get_time", "arguments": {'  # cut off mid-arguments
WHOLE = '{"name": "get_time", "arguments": {"zone": "UTC"}}'
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Now.",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
        },
    }
]


def tool_caller(directory: Path, call: str) -> Path:
    """Build a model that answers every prompt with ``<tool_call>{call}</tool_call>``."""
    chain = {"\n": "<tool_call>", "<tool_call>": call, call: "</tool_call>", "</tool_call>": "<|im_end|>"}
    return scripted_model(
        directory,
        chain,
        "<|im_end|>",
        special=["<tool_call>", "</tool_call>"],
        plain=[call],
        tokenizer_config={"tool_parser_type": "json_tools"},
    )
