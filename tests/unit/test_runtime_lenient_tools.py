"""Lenient tool-call values: what mlx_lm's parsers raise on (or cannot send as JSON) stays the text written.

Each test first shows what mlx_lm 0.32.2's own reader does with the value (it raises, or returns a number JSON
cannot carry, or the wrong type), then what the wrapped reader returns.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from mlx_agent.runtime.reply import lenient_tools
from mlx_agent.runtime.reply.tool_calls import KeepingToolCallFormatter

QWEN = "mlx_lm.tool_parsers.qwen3_coder"
SCHEMA: Any = {
    "untyped": {"description": "no type"},
    "options": {"type": "object"},
    "size": {"type": "number"},
    "count": {"type": "integer"},
    "flag": {"type": "boolean"},
    "limit": {"anyOf": [{"type": "number"}, {"type": "null"}]},
    "retries": {"type": ["integer", "null"]},
    "label": {"type": ["string", "integer"]},
    "items": {"type": "array"},
    "anything": {"type": "any"},
}


READERS = {**lenient_tools.TYPED_READERS, **lenient_tools.TEXT_KEEPING_READERS}


@pytest.fixture
def upstream() -> Iterator[dict[str, Any]]:
    """Return mlx_lm's own readers by module, and put them back after the test (``install`` replaces them)."""
    saved = {module: getattr(importlib.import_module(module), name) for module, name in READERS.items()}
    yield saved
    for module, reader in saved.items():
        setattr(importlib.import_module(module), READERS[module], reader)


def qwen_reader(upstream: dict[str, Any]) -> Any:
    """Return the lenient Qwen3-Coder reader over mlx_lm's own."""
    return lenient_tools.read_declared(upstream[QWEN])


@pytest.mark.parametrize(
    "name,text,error",
    [
        ("size", "1e400", OverflowError),  # int(float("1e400"))
        ("count", "many", ValueError),
        ("size", "nan", ValueError),
        ("anything", "{[]: 1}", TypeError),  # ast.literal_eval of an unhashable key
    ],
)
def test_values_qwen3_coder_raises_on_stay_text(upstream: dict[str, Any], name: str, text: str, error: type) -> None:
    """A value Qwen3-Coder's reader raises on is handed over as the text the model wrote."""
    with pytest.raises(error):
        upstream[QWEN](text, name, SCHEMA)
    assert qwen_reader(upstream)(text, name, SCHEMA) == text


def test_a_word_and_trailing_text_stay_text(upstream: dict[str, Any]) -> None:
    """A word for an untyped parameter, and an object with text after its closing brace, are the text written."""
    read = qwen_reader(upstream)
    assert read("soon", "untyped", SCHEMA) == "soon"
    assert read('{"depth": 2} and more', "options", SCHEMA) == '{"depth": 2} and more'
    assert read('{"depth": 2}', "options", SCHEMA) == {"depth": 2}
    assert read('{"depth": 1e400}', "options", SCHEMA) == '{"depth": 1e400}'  # JSON cannot carry infinity


def test_a_union_is_read_as_its_first_member_that_fits(upstream: dict[str, Any]) -> None:
    """``number | null`` (zod's anyOf) reads a number; a type list is tried in order; nothing fits: text."""
    read = qwen_reader(upstream)
    assert upstream[QWEN]("3.5", "limit", SCHEMA) == "3.5"  # upstream finds no single type: text
    assert read("3.5", "limit", SCHEMA) == 3.5
    assert read("null", "limit", SCHEMA) is None
    assert read("lots", "limit", SCHEMA) == "lots"
    assert read("3", "retries", SCHEMA) == 3
    assert read("3.5", "retries", SCHEMA) == "3.5"
    assert read("42", "label", SCHEMA) == "42"  # string comes first
    assert read("1e400", "limit", SCHEMA) == "1e400"


def test_single_types_read_only_what_fits(upstream: dict[str, Any]) -> None:
    """A boolean is true or false (not every other word false); an array may be a Python tuple; null is None."""
    read = qwen_reader(upstream)
    assert upstream[QWEN]("yes", "flag", SCHEMA) is False
    assert read("yes", "flag", SCHEMA) == "yes"
    assert read("True", "flag", SCHEMA) is True
    assert read("(1, 2)", "items", SCHEMA) == [1, 2]
    assert read("7", "count", SCHEMA) == 7
    assert read("2.5", "size", SCHEMA) == 2.5
    assert read("null", "count", SCHEMA) is None
    assert read("anything at all", "unknown", SCHEMA) == "anything at all"


@pytest.mark.parametrize(
    "module,args",
    [
        ("mlx_lm.tool_parsers.minimax_m2", ("1e400", ["number"])),
        ("mlx_lm.tool_parsers.minimax_m2", ("{[]: 1}", ["object"])),
        ("mlx_lm.tool_parsers.minicpm5", ("1e400", ["integer", "number"])),
        ("mlx_lm.tool_parsers.glm47", ("1e400",)),
        ("mlx_lm.tool_parsers.longcat", ("NaN",)),
        ("mlx_lm.tool_parsers.muse_spark", ("[" * 5000,)),
        ("mlx_lm.tool_parsers.kimi_k3", ("[" * 5000, "object")),
        ("mlx_lm.tool_parsers.kimi_k3", ("-1e400", "number")),
    ],
)
def test_the_other_parsers_keep_the_text_they_cannot_read(
    upstream: dict[str, Any], module: str, args: tuple[Any, ...]
) -> None:
    """Each wrapped reader raises or returns a non-finite number upstream; lenient, the text stays."""
    reader = upstream[module]
    try:
        value = reader(*args)
    except Exception:
        pass
    else:
        assert not lenient_tools.finite(value)
    assert lenient_tools.keep_text(reader)(*args) == args[0]


def test_install_wraps_each_reader_once(upstream: dict[str, Any]) -> None:
    """``install`` replaces the module-level readers, and a second install changes nothing."""
    lenient_tools.install()
    qwen = importlib.import_module(QWEN)
    first = qwen._convert_param_value
    lenient_tools.install()
    assert qwen._convert_param_value is first and getattr(first, lenient_tools.LENIENT)
    assert first.__wrapped__ is upstream[QWEN]


def test_qwen3_coder_parses_a_call_with_every_bad_value(upstream: dict[str, Any]) -> None:
    """The whole call parses: each value as the documented rule reads it (bare mlx_lm raises OverflowError)."""
    qwen = importlib.import_module(QWEN)
    call = (
        "<function=configure><parameter=untyped>soon</parameter>"
        '<parameter=options>{"depth": 2} and more</parameter><parameter=size>1e400</parameter>'
        "<parameter=limit>3.5</parameter></function>"
    )
    tools = [{"type": "function", "function": {"name": "configure", "parameters": {"properties": SCHEMA}}}]
    with pytest.raises(OverflowError):
        qwen.parse_tool_call(call, tools)
    lenient_tools.install()
    parsed = qwen.parse_tool_call(call, tools)
    assert parsed == {
        "name": "configure",
        "arguments": {"untyped": "soon", "options": '{"depth": 2} and more', "size": "1e400", "limit": 3.5},
    }


def test_a_number_json_cannot_carry_is_sent_as_text() -> None:
    """A parser that still returns infinity (a whole-JSON call) gets arguments a client's JSON parser reads."""

    def parse(text: str, tools: Any) -> Any:
        return json.loads(text)

    [call] = KeepingToolCallFormatter(parse, None)(['{"name": "f", "arguments": {"n": 1e400, "m": [NaN, -1e999]}}'])
    assert json.loads(call["function"]["arguments"], parse_constant=lambda c: pytest.fail(c)) == {
        "n": "Infinity",
        "m": ["NaN", "-Infinity"],
    }
    assert lenient_tools.json_safe({"a": (1.0, math.inf)}) == {"a": [1.0, "Infinity"]}
