"""The prompt-size check: which text it counts, and the bound it draws from the tokenizer's longest entry."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel

from mlx_agent.errors import HttpError
from mlx_agent.runtime.serving.prompt_size import SAFETY, longest_entry, prompt_chars, refuse_if_too_long

pytestmark = pytest.mark.fast


def word_level(*words: str) -> Tokenizer:
    """Return a real ``tokenizers`` word-level tokenizer over ``words`` (and [UNK])."""
    vocab = {w: i for i, w in enumerate(["[UNK]", *words])}
    return Tokenizer(WordLevel(vocab, unk_token="[UNK]"))


def test_only_the_text_every_template_renders_whole_is_counted() -> None:
    """System, developer and user text (strings and text parts) count; assistant and tool turns do not."""
    messages = [
        {"role": "system", "content": "abc"},
        {"role": "developer", "content": [{"type": "text", "text": "de"}, {"type": "image_url", "image_url": "x"}]},
        {"role": "user", "content": "fgh"},
        {"role": "assistant", "content": "<think>long thoughts</think>ok"},
        {"role": "tool", "content": "result"},
        "not a message",
    ]
    assert prompt_chars({"messages": messages}, chat=True) == 8
    assert prompt_chars({"prompt": "Once upon"}, chat=False) == 9
    assert prompt_chars({"messages": "hi"}, chat=True) == prompt_chars({"prompt": ["a"]}, chat=False) == 0


def test_the_bound_is_the_context_times_the_longest_entry_times_the_safety() -> None:
    """At the bound a prompt passes; one character past it is context_length_exceeded, naming the field."""
    tokenizer = word_level("a", "abcd", "ab")
    assert longest_entry(tokenizer) == len("[UNK]")
    bound = 10 * len("[UNK]") * SAFETY
    refuse_if_too_long({"messages": [{"role": "user", "content": "x" * bound}]}, True, 10, tokenizer)
    with pytest.raises(HttpError) as refused:
        refuse_if_too_long({"prompt": "x" * (bound + 1)}, False, 10, tokenizer)
    body = refused.value.body()["error"]
    assert (refused.value.status, body["code"], body["param"]) == (400, "context_length_exceeded", "prompt")


def test_no_window_or_no_vocabulary_means_no_size_check() -> None:
    """Without a context window, or with a tokenizer that has no vocabulary to read, nothing is refused here."""
    refuse_if_too_long({"prompt": "x" * 10**6}, False, None, word_level("a"))
    refuse_if_too_long({"prompt": "x" * 10**6}, False, 4, object())
