"""Structured output pieces: response_format to grammar, bitmasks, and wrapping up JSON on the tiny tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from mlx_agent.errors import HttpError
from mlx_agent.runtime.reply import structured

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "n", "tags"],
    "additionalProperties": False,
}


@pytest.mark.fast
@pytest.mark.parametrize("response_format", [None, {"type": "text"}])
def test_plain_text_needs_no_grammar(response_format: Any) -> None:
    """No response_format, or type text, compiles nothing."""
    assert structured.grammar_for(response_format) is None


@pytest.fixture(scope="module")
def tokenizers(tiny_model: Path) -> tuple[Any, Any]:
    """Return the tiny model's Hugging Face tokenizer and its llguidance bridge."""
    from transformers import AutoTokenizer

    hf: Any = AutoTokenizer.from_pretrained(str(tiny_model))
    return hf, structured.ll_tokenizer(hf, 512, [hf.convert_tokens_to_ids("<|im_end|>")])


def accepts(tokenizers: tuple[Any, Any], grammar: str, text: str) -> bool:
    """Say whether ``grammar`` takes every token of ``text`` (compact JSON: the grammar's whitespace is fixed)."""
    from llguidance import LLMatcher

    hf, tokenizer = tokenizers
    matcher = LLMatcher(tokenizer, grammar)
    tokens = hf.encode(text, add_special_tokens=False)
    return bool(matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting())


def test_json_object_compiles_to_a_grammar_of_objects(tokenizers: tuple[Any, Any]) -> None:
    """json_object's grammar takes a JSON object and refuses an array, a bare string and unfinished JSON."""
    grammar = structured.grammar_for({"type": "json_object"})
    assert isinstance(grammar, str)
    assert accepts(tokenizers, grammar, '{"a":[1,"b"]}')
    assert not accepts(tokenizers, grammar, "[1,2]")
    assert not accepts(tokenizers, grammar, '"text"')
    assert not accepts(tokenizers, grammar, '{"a":1')


def test_json_schema_compiles_to_a_grammar_of_that_schema(tokenizers: tuple[Any, Any]) -> None:
    """json_schema's grammar takes a document of the schema and refuses a missing, extra or ill-typed field."""
    grammar = structured.grammar_for({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}})
    assert isinstance(grammar, str)
    assert accepts(tokenizers, grammar, '{"name":"a","n":3,"tags":["x"]}')
    assert not accepts(tokenizers, grammar, '{"name":"a","n":3}')
    assert not accepts(tokenizers, grammar, '{"name":"a","n":3,"tags":[],"more":1}')
    assert not accepts(tokenizers, grammar, '{"name":"a","n":"3","tags":[]}')


@pytest.mark.fast
@pytest.mark.parametrize(
    "response_format",
    [
        "json",
        {"type": "xml"},
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"schema": True}},
        {"type": "json_schema", "json_schema": {"schema": {"type": "object", "not": {}}}},
    ],
)
def test_what_cannot_be_enforced_is_a_400(response_format: Any) -> None:
    """A format or schema that cannot be enforced is refused naming response_format."""
    with pytest.raises(HttpError) as refused:
        structured.grammar_for(response_format)
    assert (refused.value.status, refused.value.param) == (400, "response_format")


@pytest.mark.fast
def test_a_format_is_enforced_unless_a_tool_call_is_possible() -> None:
    """Tools make the format wait, unless tool_choice is "none"."""
    assert structured.format_is_enforced(None, "auto") is True
    assert structured.format_is_enforced([], None) is True
    assert structured.format_is_enforced([{"type": "function"}], None) is False
    assert structured.format_is_enforced([{"type": "function"}], "auto") is False
    assert structured.format_is_enforced([{"type": "function"}], "none") is True


@pytest.mark.fast
def test_bitmasks_round_trip() -> None:
    """Packing a boolean row and unpacking it gives the row back, padded with "not allowed"."""
    row = np.zeros(70, dtype=bool)
    row[[0, 31, 32, 69]] = True
    mask = structured.pack(row)
    assert mask.shape == (1, 3)
    assert (structured.unpack(mask, 70) == row).all()
    assert not structured.unpack(mask, 100)[70:].any()


def test_wrapping_up_finishes_json_that_validates(tiny_model: Path) -> None:
    """Taking the first wrap-up token at every step completes a valid document within the estimate."""
    from llguidance import LLMatcher
    from transformers import AutoTokenizer

    hf: Any = AutoTokenizer.from_pretrained(str(tiny_model))
    eos: list[int] = [hf.convert_tokens_to_ids("<|im_end|>")]
    tokenizer = structured.ll_tokenizer(hf, 512, eos)
    classes = structured.TokenClasses.of(tokenizer, 512)
    grammar = structured.grammar_for({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}})
    assert grammar is not None
    matcher = LLMatcher(tokenizer, grammar)
    for token in hf.encode('{"name":"A long name that goes on', add_special_tokens=False):
        assert matcher.consume_token(token)
    estimate = structured.steps_to_finish(matcher, classes, eos, 512)
    written: list[int] = []
    while not matcher.is_stopped():
        mask = structured.wrap_up(structured.allowed_mask(matcher, 512), classes, eos)
        token = int(np.flatnonzero(structured.unpack(mask, 512))[-1])  # the last choice, not the estimate's
        if token in eos:
            break
        assert matcher.consume_token(token)
        written.append(token)
    assert len(written) <= 2 * estimate + 4
    document = json.loads('{"name":"A long name that goes on' + hf.decode(written))
    jsonschema.validate(document, SCHEMA)
