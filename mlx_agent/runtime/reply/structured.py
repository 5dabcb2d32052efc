"""Structured output: ``response_format`` to an llguidance grammar, and the token facts the watcher steers by.

The grammar is compiled by llguidance from the request's JSON schema (``json_object`` is the schema
``{"type": "object"}``). JSON is compact by default (no whitespace between tokens, ``x-guidance`` in the
schema may change that): a model with random weights would otherwise pad with whitespace for ever.

To finish a JSON reply before ``max_tokens`` (or when a limit cuts it), the watcher "wraps up": among the
tokens the grammar allows it prefers, in order: closers (inside free text, where ``}`` is just text, those
that start with a quote, else those of brackets, ``}`` ``]``, before a quote that would open a string),
JSON punctuation (which also ends a number: ``,`` ``:``), tokens that open nothing, and tokens that are not
whitespace. "Inside free text" is told by the mask: it allows most of the vocabulary. ``steps_to_finish``
simulates that on a copy of the matcher to know how many tokens finishing takes from here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from llguidance import LLMatcher, LLTokenizer
from numpy.typing import NDArray

from mlx_agent.api_errors import Code
from mlx_agent.runtime.serving.errors_http import bad_request

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions

Bitmask = NDArray[np.int32]

# Applied before the schema's own "x-guidance" options, which may override them.
COMPILE_DEFAULTS: JsonCompileOptions = {"whitespace_flexible": False}
# A finish is simulated for at most this many tokens; a schema needing more is "far from done".
MAX_FINISH_STEPS = 256

_CLOSING = frozenset(b'"}]')
_BRACKETS = frozenset(b"}]")
_PUNCTUATION = frozenset(b'"}],:')
_OPENING = frozenset(b"{[")
_SPACE = frozenset(b" \t\r\n")


def format_is_enforced(tools: object, tool_choice: object) -> bool:
    """Whether ``response_format`` can be enforced: not while the model may call a tool, which is not JSON."""
    return not tools or tool_choice == "none"


def grammar_for(response_format: object) -> str | None:
    """Return the llguidance grammar for a request's ``response_format``, or None for plain text; 400 if bad."""
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping):
        raise bad_request("response_format must be an object.", param="response_format")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema: Any = {"type": "object"}
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or not isinstance(spec.get("schema"), Mapping):
            raise bad_request(
                "response_format.json_schema.schema must be a JSON schema object.", param="response_format"
            )
        schema = spec["schema"]
    else:
        raise bad_request(
            f"response_format.type {kind!r} is not supported; use 'text', 'json_object' or 'json_schema'.",
            param="response_format",
        )
    try:
        grammar = LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=COMPILE_DEFAULTS)
    except ValueError as error:
        raise bad_request(f"The JSON schema is invalid: {error}", param="response_format") from error
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise bad_request(
            f"The JSON schema cannot be enforced: {messages[0] if messages else 'invalid'}",
            param="response_format",
            code=Code.INVALID_SCHEMA,
        )
    return grammar


def ll_tokenizer(hf_tokenizer: Any, vocab_width: int, eos_ids: Sequence[int]) -> LLTokenizer:
    """Bridge a fast Hugging Face tokenizer to llguidance, covering the model's whole output row."""
    from llguidance.hf import from_tokenizer

    return from_tokenizer(hf_tokenizer, n_vocab=vocab_width, eos_token=list(eos_ids))


@dataclass(frozen=True)
class TokenClasses:
    """Bitmasks over a vocabulary, one bit per token, used to prefer tokens while wrapping up JSON."""

    quote_close: Bitmask  # a quote, then only closers: '"', '"}', '"]}'
    bracket_close: Bitmask  # only closing brackets: '}', ']}'
    punctuation: Bitmask  # only JSON punctuation that opens nothing, e.g. '",' or ','
    flat: Bitmask  # not whitespace-only and opens no object or array
    visible: Bitmask  # not whitespace-only
    visible_count: int

    @classmethod
    def of(cls, tokenizer: LLTokenizer, vocab_width: int) -> TokenClasses:
        """Classify every token of ``tokenizer`` by its bytes (once per model; it decodes the vocabulary)."""
        quote_close = np.zeros(vocab_width, dtype=bool)
        bracket_close = np.zeros(vocab_width, dtype=bool)
        punctuation = np.zeros(vocab_width, dtype=bool)
        flat = np.zeros(vocab_width, dtype=bool)
        visible = np.zeros(vocab_width, dtype=bool)
        for token in range(min(vocab_width, tokenizer.vocab_size)):
            if tokenizer.is_special_token(token):
                continue
            data = tokenizer.decode_bytes([token])
            stripped = bytes(b for b in data if b not in _SPACE)
            if not stripped:
                continue
            visible[token] = True
            flat[token] = not (_OPENING & set(data))
            quote_close[token] = stripped[0] == ord('"') and set(stripped) <= _CLOSING
            bracket_close[token] = set(stripped) <= _BRACKETS
            punctuation[token] = set(stripped) <= _PUNCTUATION
        return cls(
            pack(quote_close), pack(bracket_close), pack(punctuation), pack(flat), pack(visible), int(visible.sum())
        )


def pack(allowed: NDArray[np.bool_]) -> Bitmask:
    """Pack a boolean row into llguidance's bitmask layout: shape (1, words), bit i of word w is token 32w+i."""
    words = (len(allowed) + 31) // 32
    padded = np.zeros(words * 32, dtype=bool)
    padded[: len(allowed)] = allowed
    return np.packbits(padded, bitorder="little").view(np.int32).reshape(1, words)


def unpack(mask: Bitmask, vocab_width: int) -> NDArray[np.bool_]:
    """Return the boolean row of a bitmask, ``vocab_width`` long (tokens past the mask are not allowed)."""
    row = np.unpackbits(mask.view(np.uint8), bitorder="little")[:vocab_width].astype(bool)
    if len(row) < vocab_width:
        row = np.concatenate([row, np.zeros(vocab_width - len(row), dtype=bool)])
    return row


def allowed_mask(matcher: LLMatcher, vocab_width: int) -> Bitmask:
    """Return the grammar's mask of the tokens that may come next."""
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    mask = allocate_token_bitmask(1, vocab_width)
    fill_next_token_bitmask(matcher, mask)
    return mask


def wrap_up(mask: Bitmask, classes: TokenClasses, eos_ids: Sequence[int]) -> Bitmask:
    """Narrow a grammar mask to the tokens that finish the JSON soonest; EOS alone once the JSON is complete."""
    row = unpack(mask, mask.shape[1] * 32)
    ends = [t for t in eos_ids if t < len(row) and row[t]]
    if ends:
        only = np.zeros(len(row), dtype=bool)
        only[ends] = True
        return pack(only)
    closers = [classes.quote_close, classes.bracket_close]
    if int(np.unpackbits(mask.view(np.uint8)).sum()) * 4 < classes.visible_count:
        closers.reverse()  # not inside free text: close a bracket rather than open a string
    for preferred in (*closers, classes.punctuation, classes.flat, classes.visible):
        narrowed = mask & preferred
        if narrowed.any():
            return narrowed
    return mask


def steps_to_finish(matcher: LLMatcher, classes: TokenClasses, eos_ids: Sequence[int], vocab_width: int) -> int:
    """Return how many tokens finishing the JSON takes from the matcher's state when wrapping up."""
    trial = matcher.deep_copy()
    for steps in range(MAX_FINISH_STEPS):
        if trial.is_accepting() or trial.is_stopped():
            return steps
        allowed = np.flatnonzero(unpack(wrap_up(allowed_mask(trial, vocab_width), classes, eos_ids), vocab_width))
        if len(allowed) == 0 or not trial.consume_token(int(allowed[0])):
            return steps
    return MAX_FINISH_STEPS
