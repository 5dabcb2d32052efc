"""Tool-call values that do not read as their declared type stay the text the model wrote.

mlx_lm's tool parsers turn each parameter's text into a value, and some raise on values real models write,
so the whole call fails (bare mlx_lm drops it; an ``OverflowError`` even escapes its handler): Qwen3-Coder reads
a number as ``int(float(text))`` (``1e400`` overflows, a word raises) and a Python literal for an unknown type
(``{[]: 1}`` raises ``TypeError``); MiniMax-M2 and MiniCPM5 overflow the same way; Muse Spark and Kimi K3 let a
deeply nested value's ``RecursionError`` out. Others read ``1e400`` as infinity, which JSON cannot carry (the
client gets ``Infinity``, which no JSON parser reads). ``install`` wraps each such reader:

* Qwen3-Coder (``read_declared``): the declared type decides. A union (``"type": [...]``, ``anyOf``, ``oneOf``:
  zod writes ``number | null`` as ``anyOf``) is read as its first member the text fits; a single type the same
  way; text that fits no member, or a value that is not a finite number, stays the text as written; the word
  ``null`` is ``None``, as upstream reads it.
* the others (``keep_text``): the parser's own reading, unless it raises or gives a non-finite number: then the
  text as written.

A call no parser can read at all still comes back with the ``unparsed_tool_calls`` marker (``tool_calls``).
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable, Mapping
from typing import Any

# Every reader wrapped: module -> the function that reads one value (its first argument is the text).
TYPED_READERS = {"mlx_lm.tool_parsers.qwen3_coder": "_convert_param_value"}
TEXT_KEEPING_READERS = {
    "mlx_lm.tool_parsers.minimax_m2": "_convert_param_value_with_types",
    "mlx_lm.tool_parsers.minicpm5": "_convert_param_value_with_types",  # imported from minimax_m2: its own name
    "mlx_lm.tool_parsers.glm47": "_deserialize",  # also laguna's, which imports glm47's parser
    "mlx_lm.tool_parsers.longcat": "_deserialize",
    "mlx_lm.tool_parsers.muse_spark": "_param_value",
    "mlx_lm.tool_parsers.kimi_k3": "_decode_value",
}
LENIENT = "mlx_agent_lenient"  # marks a wrapped reader, so that installing twice wraps once

_STRING = ("string", "str", "text", "varchar", "char", "enum")
_INTEGER = ("int", "uint", "long", "short", "unsigned")
_NOT_READ = object()

Reader = Callable[..., Any]


def install() -> None:
    """Wrap the value readers of mlx_lm's tool parsers (module docstring); idempotent."""
    for wrap, readers in ((read_declared, TYPED_READERS), (keep_text, TEXT_KEEPING_READERS)):
        for module_name, name in readers.items():
            module = importlib.import_module(module_name)
            reader = getattr(module, name)
            if not getattr(reader, LENIENT, False):
                setattr(module, name, wrap(reader))


def keep_text(reader: Reader) -> Reader:
    """Wrap a value reader so that a value it cannot read, or reads as a non-finite number, stays its text."""

    @functools.wraps(reader)
    def read(text: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            value = reader(text, *args, **kwargs)
        except Exception:  # parsers raise anything from ValueError to RecursionError on odd text
            return text
        return value if finite(value) else text

    setattr(read, LENIENT, True)
    return read


def read_declared(convert: Reader) -> Reader:
    """Wrap Qwen3-Coder's ``_convert_param_value(text, name, config)`` to read a value as its declared type."""
    upstream = keep_text(convert)

    @functools.wraps(convert)
    def read(param_value: str, param_name: str, param_config: Any) -> Any:
        if param_value.lower() == "null":
            return None
        schema = param_config.get(param_name) if isinstance(param_config, Mapping) else None
        members = [kind for kind in map(json_type, declared_types(schema)) if kind is not None]
        if not members:
            return upstream(param_value, param_name, param_config)
        for kind in members:
            value = read_as(convert, param_value, kind)
            if value is not _NOT_READ:
                return value
        return param_value

    setattr(read, LENIENT, True)
    return read


def declared_types(schema: object) -> list[str]:
    """Return the type names a parameter's schema declares, in order: ``type`` (one or a list), or its union's."""
    if not isinstance(schema, Mapping):
        return []
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [name for name in declared if isinstance(name, str)]
    names: list[str] = []
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list):
            for member in members:
                names.extend(declared_types(member))
    return names


def json_type(name: str) -> str | None:
    """Return the JSON type a declared type name means to Qwen3-Coder's parser, or None for one it does not know."""
    name = name.strip().lower()
    if name in _STRING:
        return "string"
    if name.startswith(_INTEGER):
        return "integer"
    if name.startswith(("num", "float")):
        return "number"
    if name in ("boolean", "bool", "binary"):
        return "boolean"
    if name == "object" or name.startswith("dict"):
        return "object"
    if name in ("array", "arr") or name.startswith("list"):
        return "array"
    return "null" if name == "null" else None


def read_as(convert: Reader, text: str, kind: str) -> Any:
    """Return ``text`` read as a value of the JSON type ``kind`` (the parser reads it), or ``_NOT_READ``."""
    if kind == "string":
        return text
    if kind == "null":
        return None if text.strip().lower() == "null" else _NOT_READ
    if kind == "boolean":  # the parser reads every word but "true" as false
        word = text.strip().lower()
        return word == "true" if word in ("true", "false") else _NOT_READ
    try:
        value = convert(text, "value", {"value": {"type": kind}})
    except Exception:
        return _NOT_READ
    if not finite(value):
        return _NOT_READ
    if kind == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else _NOT_READ
    if kind == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else _NOT_READ
    if kind == "object":
        return value if isinstance(value, dict) else _NOT_READ
    return list(value) if isinstance(value, list | tuple) else _NOT_READ  # a Python tuple is an array too


def finite(value: object) -> bool:
    """Whether ``value`` holds no infinite or NaN number (JSON can carry it), looking inside lists and objects."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(finite(item) for item in value)
    if isinstance(value, dict):
        return all(finite(item) for item in value.values())
    return True


def json_safe(value: Any) -> Any:
    """Return ``value`` with each non-finite number replaced by the text JSON would need (``"Infinity"``, ``"NaN"``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    return value
