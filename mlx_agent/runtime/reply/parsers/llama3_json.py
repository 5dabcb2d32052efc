"""Llama 3.1, 3.2 and 3.3: a call is the JSON object ``{"name": NAME, "parameters": {...}}``, as the template asks.

The model writes the object alone (Llama 3.1 sometimes after ``<|python_tag|>``), with no end marker but its end of
turn; a model that makes more than one call writes the objects one after another, separated by ``;`` or
whitespace. The built-in tools' form is ``<|python_tag|>NAME.call(key="value", ...)`` (the template's
``builtin_tools``). Both ``{"name":`` and ``<|python_tag|>`` start the text machine's tool state
(``TOOL_CALL_STARTS``, installed by ``family_parsers``), which takes the marker out of ``text``: ``{"name":`` is
put back before reading. A reply to a request without tools, or a JSON object without ``parameters`` (an answer
that merely starts with ``{"name":``), raises ``NotACall``: the formatter hands it back as the content it was.
Anything else that does not read raises, and the formatter keeps it as text with the ``unparsed_tool_calls``
marker.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from mlx_agent.runtime.reply.parsers import NotACall

tool_call_start = '{"name":'
tool_call_end = ""
PYTHON_TAG = "<|python_tag|>"
TOOL_CALL_STARTS = (tool_call_start, PYTHON_TAG)  # every text that starts a call (tool_call_start is the first)
_decoder = json.JSONDecoder()


def parse_tool_call(text: str, tools: Any = None) -> dict[str, Any] | list[dict[str, Any]]:
    """Return the call (or calls, in order) written in ``text``; raise ``ValueError`` on anything else."""
    if not tools:
        raise NotACall("the request has no tools: the text is the answer")
    body = text.removeprefix(PYTHON_TAG).strip()
    if not body.startswith("{"):
        if _is_builtin(body):
            return _builtin_call(body)
        body = tool_call_start + text  # the start marker the text machine took
    calls: list[dict[str, Any]] = []
    at = 0
    while at < len(body):
        value, at = _decoder.raw_decode(body, at)
        calls.append(_call(value))
        while at < len(body) and (body[at].isspace() or body[at] == ";"):
            at += 1
        if at < len(body) and body.startswith(PYTHON_TAG, at):
            at += len(PYTHON_TAG)
    if not calls:
        raise ValueError(f"no call in {text!r}")
    return calls[0] if len(calls) == 1 else calls


def _call(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ValueError(f"not a call: {value!r}")
    if "parameters" not in value and "arguments" not in value:
        raise NotACall(f"a JSON object without parameters: {value!r}")
    arguments = value.get("parameters", value.get("arguments"))
    if isinstance(arguments, str):  # some fine-tunes write the arguments as a JSON string
        arguments = json.loads(arguments)
    if not isinstance(arguments, dict):
        raise ValueError(f"a call without a parameters object: {value!r}")
    return {"name": value["name"], "arguments": arguments}


def _is_builtin(body: str) -> bool:
    name, dot, _ = body.partition(".call(")
    return bool(dot) and name.isidentifier()


def _builtin_call(body: str) -> dict[str, Any]:
    """Read ``NAME.call(key=literal, ...)``: keyword arguments of Python literals only."""
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError as error:
        raise ValueError(f"not a built-in call: {body!r}") from error
    if (
        not isinstance(tree, ast.Call)
        or tree.args
        or not isinstance(tree.func, ast.Attribute)
        or tree.func.attr != "call"
        or not isinstance(tree.func.value, ast.Name)
    ):
        raise ValueError(f"not a built-in call: {body!r}")
    arguments = {kw.arg: ast.literal_eval(kw.value) for kw in tree.keywords if kw.arg is not None}
    return {"name": tree.func.value.id, "arguments": arguments}
