"""The real worker reads Llama 3.x, DeepSeek V3.1 and Mistral Small 3.2 calls, with an Edit's newlines kept.

mlx_lm 0.32 has no parser for the first two and reads the third's ``[CALL_ID]`` as the call's name. Each model
is scripted (``wrapped_support.scripted_model``) to answer with one Edit call written its family's way. Its
template is the tiny model's own with the family's markers in a Jinja comment (they pick the parser as the real
template's do, ``tool_formats``; the comment renders to nothing), so the worker chooses the parser through
mlx_lm's own selection with ``family_parsers`` installed, as it would for the real checkpoint. The full real
templates and every case of each family are read in-process by ``tests/unit/test_family_tool_calls.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.runtime.reply.parsers import deepseek_v3 as ds
from tests.e2e.wrapped_support import running, scripted_model
from tests.fixtures.tiny_model import CHAT_TEMPLATE

pytestmark = pytest.mark.e2e

ARGUMENTS = {"file_path": "a.py", "old_string": "x = 1\n", "new_string": "\n  y = 2\n"}
ARGS = json.dumps(ARGUMENTS)
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "Edit",
            "description": "Edit a file.",
            "parameters": {"type": "object", "properties": {k: {"type": "string"} for k in ARGUMENTS}},
        },
    }
]
ASK: Any = {"messages": [{"role": "user", "content": "Edit it."}], "tools": TOOLS, "max_tokens": 16}
DS = (ds.tool_call_start, ds.CALL_BEGIN, ds.SEP, ds.CALL_END, ds.tool_call_end)  # DeepSeek's own tokens


def served_call(
    tmp_path: Path, markers: str, steps: list[str], special: list[str], asks: tuple[Any, ...] = (ASK,)
) -> Any:
    """Serve a model that writes ``steps`` (one token each) after the prompt; return each ask's first choice."""
    chain = dict(zip(["\n", *steps], [*steps, "<|im_end|>"], strict=True))
    model = scripted_model(
        tmp_path / "model",
        chain,
        "<|im_end|>",
        special=special,
        plain=[step for step in steps if step not in special],
        template=CHAT_TEMPLATE + "{# " + markers + " #}",
    )
    choices = []
    with running(model, tmp_path) as server:
        for ask in asks:
            status, answer = server.post(ask)
            assert status == 200, answer
            choices.append(streamed(answer) if ask.get("stream") else answer["choices"][0])
    return choices[0] if len(asks) == 1 else choices


def streamed(text: str) -> dict[str, Any]:
    """Return a stream's choice as one message: its content, tool calls and marker joined, its last finish."""
    chunks = [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: {")]
    choices = [chunk["choices"][0] for chunk in chunks if chunk["choices"]]
    deltas = [choice["delta"] for choice in choices]
    message: dict[str, Any] = {
        "content": "".join(d.get("content") or "" for d in deltas),
        "tool_calls": [call for d in deltas for call in d.get("tool_calls") or []],
    }
    if marked := [m for d in deltas for m in d.get("unparsed_tool_calls") or []]:
        message["unparsed_tool_calls"] = marked
    return {"message": message, "finish_reason": choices[-1]["finish_reason"]}


def the_edit(choice: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """Return the one call's name, arguments and id, after checking the reply ends as a call."""
    assert choice["finish_reason"] == "tool_calls", choice
    assert "unparsed_tool_calls" not in choice["message"], choice
    [call] = choice["message"]["tool_calls"]
    return call["function"]["name"], json.loads(call["function"]["arguments"]), call["id"]


def test_a_llama_call_is_a_call(tmp_path: Path) -> None:
    """``{"name": "Edit", "parameters": {...}}`` is the Edit call, streamed or not; asked without tools, the answer."""
    rest = ' "Edit", "parameters": ' + ARGS + "}"
    no_tools = {key: value for key, value in ASK.items() if key != "tools"}
    asks = (ASK, {**ASK, "stream": True}, no_tools)
    choice, stream, answer = served_call(tmp_path, '"parameters" <|python_tag|>', ['{"name":', rest], [], asks)
    for reply in (choice, stream):
        assert the_edit(reply)[:2] == ("Edit", ARGUMENTS)
        assert not reply["message"]["content"]
    assert answer["message"]["content"] == '{"name":' + rest  # the JSON the model wrote, as it wrote it
    assert "unparsed_tool_calls" not in answer["message"] and answer["finish_reason"] == "stop"


def test_a_deepseek_call_is_a_call(tmp_path: Path) -> None:
    """DeepSeek V3.1's call block arrives as the Edit call, its strings exact."""
    begin, call, sep, end, close = DS
    choice = served_call(tmp_path, begin + sep, [begin, call, "Edit", sep, ARGS, end, close], list(DS))
    assert the_edit(choice)[:2] == ("Edit", ARGUMENTS)


def test_a_mistral_small_call_keeps_its_name_and_id(tmp_path: Path) -> None:
    """``[TOOL_CALLS]Edit[CALL_ID]123456789[ARGS]{...}`` is the call Edit with the model's id, not one "123456789"."""
    special = ["[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"]
    steps = ["[TOOL_CALLS]", "Edit", "[CALL_ID]", "123456789", "[ARGS]", ARGS]
    choice = served_call(tmp_path, "[TOOL_CALLS]", steps, special)
    assert the_edit(choice) == ("Edit", ARGUMENTS, "123456789")
