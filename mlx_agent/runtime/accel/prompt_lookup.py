"""Prompt-lookup decoding: greedy decoding that drafts tokens from the prompt and verifies them in one pass.

A code edit repeats most of its source. ``NgramIndex`` remembers where each short n-gram of the last
``lookup_window`` prompt tokens (and of the reply so far) last occurred; the draft is what followed the most
recent occurrence of the longest n-gram the sequence ends with, at most ``max_draft`` tokens.
``LookupDecoder`` feeds the pending token and the draft to the target model in one forward pass, keeps the
draft's prefix that agrees with the model's own greedy choices plus the model's next token, and trims the rest
from the KV cache. Every emitted token is the model's argmax at its position, so the output is the greedy
output (up to floating-point ties between the one-token and the many-token forward pass).

Where no draft exists the decoder runs plain steps pipelined as mlx_lm's ``generate_step`` does (the next
step is queued before the current token is read), so text with nothing to copy keeps close to native speed.
A draft the model rejects outright pauses drafting for a few tokens (``COOLDOWN``), doubling on each further
miss, so ordinary chat does not pay for many useless verifications.

A reply with a watcher (thinking, limits, a schema) is steered by it (``Steering``, see ``lookup_verify``): each
position's logits are masked as the watcher would mask them natively before the argmax, and the watcher takes
back the positions of a draft that were rejected.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache, trim_prompt_cache
from numpy.typing import NDArray

MIN_NGRAM = 2  # a single shared token proposes too many wrong drafts in ordinary text
MAX_NGRAM = 4
COOLDOWN = 2  # tokens without drafting after a draft the model rejected entirely; doubles per miss
MAX_COOLDOWN = 32
CLEAR_EVERY = 256  # tokens between releases of MLX's buffer cache, as generate_step does


class NgramIndex:
    """Where each recent n-gram (MIN_NGRAM..MAX_NGRAM tokens) last occurred with a token after it."""

    def __init__(self, prompt: Sequence[int], window: int) -> None:
        self.tokens: list[int] = list(prompt[-window:]) if window > 0 else []
        self._last: dict[tuple[int, ...], int] = {}
        for end in range(len(self.tokens) - 1):
            self._remember(end)

    def _remember(self, end: int) -> None:
        """Record the n-grams that end at ``end`` (a position that has a successor)."""
        tokens = self.tokens
        for n in range(MIN_NGRAM, MAX_NGRAM + 1):
            if end - n + 1 < 0:
                break
            self._last[tuple(tokens[end - n + 1 : end + 1])] = end

    def append(self, token: int) -> None:
        """Add one token of the reply."""
        self.tokens.append(token)
        self._remember(len(self.tokens) - 2)

    def draft(self, limit: int) -> list[int]:
        """Return up to ``limit`` tokens that followed the latest earlier occurrence of the longest suffix n-gram."""
        tokens = self.tokens
        size = len(tokens)
        if limit <= 0:
            return []
        for n in range(min(MAX_NGRAM, size), MIN_NGRAM - 1, -1):
            end = self._last.get(tuple(tokens[size - n :]))
            if end is not None:
                return tokens[end + 1 : end + 1 + limit]
        return []


@dataclass
class LookupStats:
    """Counts of one reply (or of all replies): forward passes, drafted and accepted tokens."""

    tokens: int = 0  # tokens emitted
    passes: int = 0  # forward passes of the target model after the prompt
    verifications: int = 0  # passes that verified a draft
    drafted: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        """The share of drafted tokens the model agreed with."""
        return self.accepted / self.drafted if self.drafted else 0.0

    def add(self, other: LookupStats) -> None:
        """Add another reply's counts to these."""
        self.tokens += other.tokens
        self.passes += other.passes
        self.verifications += other.verifications
        self.drafted += other.drafted
        self.accepted += other.accepted

    def describe(self) -> str:
        """Return the counts as one phrase for the log."""
        return (
            f"{self.tokens} tokens in {self.passes} forward passes, {self.accepted} of {self.drafted} drafted "
            f"tokens accepted ({100 * self.acceptance:.1f}%)"
        )


class Steering(Protocol):
    """What masks the decoder's greedy choices: a row of allowed tokens per position, or None (any)."""

    def draft(self, sequence: Sequence[int], draft: list[int]) -> tuple[list[int], NDArray[np.bool_] | None]:
        """Return the draft to verify after ``sequence`` (perhaps cut) and the mask of each of its positions."""
        ...

    def accept(self, count: int) -> None:
        """Take back the positions after the first ``count`` draft tokens."""
        ...

    def step(self, sequence: Sequence[int], pending: Any) -> NDArray[np.bool_] | None:
        """Return the mask after ``sequence`` and the token ``pending`` not yet read (None: no such token)."""
        ...


def plain_kv_cache(cache: Sequence[Any]) -> bool:
    """Whether a prompt cache is made only of ordinary, trimmable ``KVCache`` layers."""
    return bool(cache) and all(type(layer) is KVCache for layer in cache)


class LookupDecoder:
    """Greedy decoding of one reply with prompt-lookup drafts (see the module docstring).

    The cache holds every token of ``sequence`` but the last, which is pending: it is fed with the next draft
    (a cache given with the whole sequence is trimmed by one). ``in_cache`` counts the tokens in the cache;
    once the generator is closed it is at most ``len(sequence)`` and the cache holds exactly
    ``sequence[:in_cache]``.
    """

    def __init__(
        self,
        model: Any,
        cache: list[Any],
        sequence: Sequence[int],
        in_cache: int,
        *,
        window: int,
        max_draft: int,
        steering: Steering | None = None,
    ) -> None:
        self.model = model
        self.steering = steering
        self.cache = cache
        self.sequence = list(sequence)
        self.in_cache = in_cache
        if in_cache >= len(self.sequence):  # the last token must be fed again: it is the pending one
            trim_prompt_cache(cache, in_cache - len(self.sequence) + 1)
            self.in_cache = len(self.sequence) - 1
        self.index = NgramIndex(self.sequence, window)
        self.max_draft = max_draft
        self.stats = LookupStats()
        self._cooldown = 0
        self._next_cooldown = COOLDOWN

    # -- the prompt ------------------------------------------------------------------------------------------

    def prefill(self, step: int, progress: Callable[[int, int], None] | None = None) -> None:
        """Feed the sequence's uncached tokens but the last to the model, ``step`` tokens at a time."""
        total = len(self.sequence) - self.in_cache
        done = 0
        if progress is not None:
            progress(done, total)
        while len(self.sequence) - 1 - self.in_cache > 0:
            count = min(step, len(self.sequence) - 1 - self.in_cache)
            chunk = mx.array(self.sequence[self.in_cache : self.in_cache + count], dtype=mx.uint32)
            self.model(chunk[None], cache=self.cache)
            mx.eval([layer.state for layer in self.cache])
            self.in_cache += count
            done += count
            if progress is not None:
                progress(done, total)
            mx.clear_cache()
        if progress is not None:
            progress(total, total)

    # -- the reply -------------------------------------------------------------------------------------------

    def generate(self, max_tokens: int) -> Generator[int, None, None]:
        """Yield up to ``max_tokens`` greedy tokens; closing the generator leaves the cache consistent."""
        emitted = 0
        try:
            while emitted < max_tokens:
                draft = self._draft(max_tokens - emitted - 1)
                tokens = self._verify(draft) if draft else None
                if tokens is None:
                    for token in self._plain(max_tokens - emitted):
                        emitted += 1
                        yield token
                    continue
                for token in tokens:
                    emitted += 1
                    self._emit(token)
                    yield token
        finally:
            excess = self.in_cache - len(self.sequence)
            if excess > 0:
                trim_prompt_cache(self.cache, excess)
                self.in_cache -= excess

    def _emit(self, token: int) -> None:
        self.sequence.append(token)
        self.index.append(token)
        self.stats.tokens += 1
        if self.stats.tokens % CLEAR_EVERY == 0:
            mx.clear_cache()

    def _draft(self, limit: int) -> list[int]:
        if self._cooldown > 0:
            return []
        return self.index.draft(min(limit, self.max_draft))

    def _choices(self, inputs: mx.array, allowed: NDArray[np.bool_] | None = None) -> mx.array:
        """Return the greedy token after each input position, lazily (mlx_lm's greedy: argmax of logprobs)."""
        logits = self.model(inputs[None], cache=self.cache)[0]
        if allowed is not None:  # as the watcher masks a row natively, before the log-softmax
            logits = mx.where(mx.array(allowed), logits, mx.array(-np.inf, dtype=logits.dtype))
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        return mx.argmax(logprobs, axis=-1)

    def _verify(self, draft: list[int]) -> list[int]:
        """Feed the pending token and ``draft``; return the agreeing prefix and the model's next token."""
        allowed = None
        if self.steering is not None:
            draft, allowed = self.steering.draft(self.sequence, draft)
        inputs = mx.array([self.sequence[-1], *draft], dtype=mx.uint32)
        choices = cast(list[int], self._choices(inputs, allowed).tolist())
        self.in_cache += len(inputs)
        accepted = 0
        while accepted < len(draft) and choices[accepted] == draft[accepted]:
            accepted += 1
        if self.steering is not None:
            self.steering.accept(accepted)
        rejected = len(draft) - accepted
        if rejected:
            trim_prompt_cache(self.cache, rejected)
            self.in_cache -= rejected
        self.stats.passes += 1
        self.stats.verifications += bool(draft)
        self.stats.drafted += len(draft)
        self.stats.accepted += accepted
        if accepted == 0:
            self._cooldown = self._next_cooldown
            self._next_cooldown = min(2 * self._next_cooldown, MAX_COOLDOWN)
        else:
            self._next_cooldown = COOLDOWN
        return choices[: accepted + 1]

    def _plain(self, budget: int) -> Generator[int, None, None]:
        """Yield plain greedy tokens, each step queued before the previous token is read, until a draft exists."""
        current = self._choices(mx.array(self.sequence[-1:], dtype=mx.uint32), self._mask(None))
        mx.async_eval(current)  # type: ignore[no-untyped-call]
        self.in_cache += 1
        self.stats.passes += 1
        produced = 0
        while True:
            produced += 1
            following = None
            if produced < budget:
                following = self._choices(current, self._mask(current))
                mx.async_eval(following)  # type: ignore[no-untyped-call]
                self.in_cache += 1
                self.stats.passes += 1
            token = cast(int, current.item())
            self._emit(token)
            if self._cooldown > 0:
                self._cooldown -= 1
            yield token
            if following is None:
                return
            if self._draft(budget - produced - 1):
                # The next token is already on its way: take it, then verify drafts from there.
                token = cast(int, following.item())
                self._emit(token)
                yield token
                return
            current = following

    def _mask(self, pending: mx.array | None) -> NDArray[np.bool_] | None:
        return None if self.steering is None else self.steering.step(self.sequence, pending)
