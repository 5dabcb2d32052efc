"""A Harmony tool call, read from the message as the model wrote it, in the shape mlx_lm's parsers return.

Pure: no mlx. The text is what ``harmony.split`` files as a call: the header (with the recipient, in the role
or the channel part, with or without ``<|constrain|>json``), ``<|message|>``, then the arguments. The name is
the recipient less its ``functions.`` namespace (another recipient, such as ``browser.search``, is the name as
written). Arguments that are a JSON object are the arguments; anything else (not JSON, a JSON value that is
not an object, a number too large for JSON) is handed over as written under ``RAW_ARGUMENTS``, so the call
still reaches the agent, which can show the model what it wrote.
"""

from __future__ import annotations

import json
import math
from typing import Any

from mlx_agent.runtime.reply.harmony import CUT_OFF, MESSAGE, read_header

# The key that carries arguments that are not a JSON object: {"_raw": "what the model wrote"}.
RAW_ARGUMENTS = "_raw"
FUNCTIONS = "functions."


def parse_call(text: str, tools: Any = None) -> dict[str, Any]:
    """Return ``{"name", "arguments"}`` for a Harmony call message; raise ``ValueError`` for one that is not a call."""
    if text.endswith(CUT_OFF):
        raise ValueError("the reply reached max_tokens inside this tool call")
    header, found, body = text.partition(MESSAGE)
    if not found:
        raise ValueError("the tool call has no <|message|>")
    recipient = read_header(header).recipient or ""
    name = recipient.removeprefix(FUNCTIONS) if recipient.startswith(FUNCTIONS) else recipient
    if not name:
        raise ValueError(f"the tool call names no function: {header!r}")
    return {"name": name, "arguments": read_arguments(body)}


def read_arguments(body: str) -> dict[str, Any]:
    """Return the arguments written in ``body``: a JSON object as is, anything else under ``RAW_ARGUMENTS``."""
    written = body.strip()
    if not written:
        return {}
    try:
        value = json.loads(written, parse_float=_finite, parse_constant=_no_constant)
    except ValueError:
        return {RAW_ARGUMENTS: written}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: written}


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} does not fit in a JSON number")
    return value


def _no_constant(text: str) -> float:
    raise ValueError(f"{text} is not JSON")
