"""DeepSeek V3.1 and the R1 distills: ``tool_call_start``, then one ``CALL_BEGIN ... CALL_END`` per call.

V3.1 writes ``NAME SEP {json} CALL_END``; the R1 distills' template writes ``function SEP NAME``, a newline and
the arguments in a json code block, then ``CALL_END`` (the markers are DeepSeek's own tokens, below). Both end
the block with ``tool_call_end`` (the text machine's end marker, so it is not in ``text``). A call without its
end (cut by max_tokens) or whose arguments are not one JSON object raises, and the formatter keeps it as text.
"""

from __future__ import annotations

import json
from typing import Any

tool_call_start = "<｜tool▁calls▁begin｜>"  # noqa: RUF001  (DeepSeek's own tokens)
tool_call_end = "<｜tool▁calls▁end｜>"  # noqa: RUF001
CALL_BEGIN = "<｜tool▁call▁begin｜>"  # noqa: RUF001
CALL_END = "<｜tool▁call▁end｜>"  # noqa: RUF001
SEP = "<｜tool▁sep｜>"  # noqa: RUF001
FENCE = "```"


def parse_tool_call(text: str, tools: Any = None) -> dict[str, Any] | list[dict[str, Any]]:
    """Return the call (or calls, in order) written in ``text``; raise ``ValueError`` on anything else."""
    pieces = text.split(CALL_BEGIN)
    if pieces[0].strip() or len(pieces) < 2:
        raise ValueError(f"no {CALL_BEGIN} call in {text!r}")
    calls = [_call(piece) for piece in pieces[1:]]
    return calls[0] if len(calls) == 1 else calls


def _call(piece: str) -> dict[str, Any]:
    body, ended, rest = piece.partition(CALL_END)
    if not ended or rest.strip():
        raise ValueError(f"a call without its {CALL_END} (cut short?): {piece!r}")
    head, sep, arguments = body.partition(SEP)
    if not sep:
        raise ValueError(f"a call without {SEP}: {piece!r}")
    name = head.strip()
    if name == "function" and "\n" in arguments:  # the R1 form: the type, then the name on its own line
        name, _, arguments = arguments.partition("\n")
        name = name.strip()
        arguments = arguments.strip()
        if arguments.startswith(FENCE):
            arguments = arguments.removeprefix(FENCE).removeprefix("json")
            if not arguments.rstrip().endswith(FENCE):
                raise ValueError(f"an unclosed ``` block: {piece!r}")
            arguments = arguments.rstrip().removesuffix(FENCE)
    value = json.loads(arguments)
    if not name or not isinstance(value, dict):
        raise ValueError(f"not a call: {piece!r}")
    return {"name": name, "arguments": value}
