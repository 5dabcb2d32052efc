"""Refusing a prompt too long for the context by its size, before anything tokenizes it.

mlx_lm tokenizes a prompt in its one generation thread, so an 8 MB prompt held every other client for
seconds (and the worker at 1.8 GB) only to be refused by the context check after. A token covers at most
as many characters as the tokenizer's longest vocabulary entry (a byte-level entry's length is its byte
count, which bounds its characters), so a prompt whose text has more characters than the context holds
tokens of that length cannot fit, whatever the template adds. ``SAFETY`` more is allowed for normalizers
that merge characters; the text counted is what every template renders whole (system, developer and user
turns, a completion's prompt); what a template may drop (an earlier turn's thinking) is not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.runtime.serving.errors_http import bad_request

SAFETY = 2
RENDERED_WHOLE = ("system", "developer", "user")
_longest: dict[int, tuple[Any, int]] = {}  # id(tokenizer) -> (the tokenizer, kept alive; its longest entry)


def longest_entry(tokenizer: Any) -> int | None:
    """Return the length of the tokenizer's longest vocabulary entry (read once per tokenizer; None: unknown)."""
    known = _longest.get(id(tokenizer))
    if known is not None and known[0] is tokenizer:
        return known[1]
    try:
        vocab: Mapping[str, int] = tokenizer.get_vocab()
        longest = max(max((len(entry) for entry in vocab), default=1), 1)
    except Exception:  # a tokenizer without a readable vocabulary: no bound, mlx_lm's own check stays
        return None
    _longest[id(tokenizer)] = (tokenizer, longest)
    return longest


def _text_chars(content: object) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return 0


def prompt_chars(body: Mapping[str, Any], chat: bool) -> int:
    """Return the characters of the request's text that every chat template renders whole."""
    if not chat:
        prompt = body.get("prompt")
        return len(prompt) if isinstance(prompt, str) else 0
    messages = body.get("messages")
    if not isinstance(messages, list):
        return 0
    return sum(
        _text_chars(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") in RENDERED_WHOLE
    )


def refuse_if_too_long(body: Mapping[str, Any], chat: bool, window: int | None, tokenizer: Any) -> None:
    """Refuse (400 ``context_length_exceeded``) a prompt whose text alone cannot fit ``window`` tokens."""
    if window is None:
        return
    chars = prompt_chars(body, chat)
    longest = longest_entry(tokenizer)
    if longest is None or chars <= window * longest * SAFETY:
        return
    raise bad_request(
        f"The prompt's text is {chars} characters, more than this model's context of {window} tokens can hold "
        f"(no token of its tokenizer is longer than {longest} characters); shorten the conversation.",
        param="messages" if chat else "prompt",
        code=Code.CONTEXT_LENGTH_EXCEEDED,
    )
