"""A click-free path for the ``--json`` calls agents make in loops (previews, status, stop).

Importing Click costs several times Python's own start-up, so a well-formed ``--json`` invocation of a
command in ``plan.requests.COMMANDS`` is parsed here from the same option declarations. Anything this parser does
not accept outright (``--help``, an unknown option, a bad value, ``--confirm``) falls back to Click, which
owns every error message.
"""

from __future__ import annotations

from mlx_agent.plan.options import Opt, choices, problem
from mlx_agent.plan.requests import COMMANDS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.plan.options import Record

_CONVERT = {"str": str, "multi": str, "list": str, "json": str, "int": int, "float": float}


def _value(opt: Opt, raw: str) -> Any:
    value = _CONVERT[opt.kind](raw)
    allowed = choices(opt)
    if problem(opt, value) is not None or (allowed is not None and value not in allowed):
        raise ValueError(raw)
    return value


def parse(argv: list[str]) -> tuple[tuple[str, str], Record, dict[str, Any]] | None:
    """Return the command, its record and its own flags if ``argv`` is a plain ``--json`` call this path serves."""
    if len(argv) < 2 or "--json" not in argv or "--confirm" in argv:
        return None
    key = (argv[0], argv[1])
    command = COMMANDS.get(key)
    if command is None:
        return None
    options = command.options
    by_flag = {opt.flag: opt for opt in options}
    values: dict[str, Any] = {opt.dest: [] if opt.kind == "multi" else opt.default for opt in options}
    seen: set[str] = set()
    rest = argv[2:]
    i = 0
    try:
        while i < len(rest):
            flag, eq, inline = rest[i].partition("=")
            opt = by_flag.get(flag)
            if opt is None or (flag in seen and opt.kind != "multi"):
                return None
            seen.add(flag)
            if opt.kind == "flag":
                if eq:
                    return None
                values[opt.dest] = True
                i += 1
                continue
            if eq:
                raw, i = inline, i + 1
            elif i + 1 < len(rest):
                raw, i = rest[i + 1], i + 2
            else:
                return None
            if opt.kind == "multi":
                values[opt.dest].append(_value(opt, raw))
            else:
                values[opt.dest] = _value(opt, raw)
    except ValueError:
        return None
    if any(opt.required and opt.flag not in seen for opt in options):
        return None
    record, flags = command.parse(values)
    return key, record, flags


def run_fast(argv: list[str]) -> bool:
    """Run ``argv`` without Click if it is a plain ``--json`` call; return False to let Click handle it."""
    parsed = parse(argv)
    if parsed is None:
        return False
    from mlx_agent.cli.actions import dispatch

    key, record, flags = parsed
    dispatch(key, record, flags)
    return True
