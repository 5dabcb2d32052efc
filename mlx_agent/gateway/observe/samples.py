"""What each model did over the last minute, in one-second samples: the windows of ``serve top`` and status.

A ``Ring`` holds ``WINDOW_S`` buckets, one per second, reused as the seconds go round (a bucket older than the
window is emptied before it is used again). What is added to it:

* completion tokens as a stream's events arrive (one per ``data:`` event; the usage's count at the end makes
  up any difference), and a plain reply's at its end;
* prompt and cached prompt tokens, a request, and its time to first token, when a request ends;
* prefill tokens, as the worker reports them read (``gateway.models.progress``).

``window`` sums the buckets of the last ``WINDOW_S`` seconds (fewer while the front is younger than that) into
rates, the mean time to first token, the prompt-cache hit share (cached ÷ prompt tokens) and the tokens of
each second, oldest first (the sparkline ``serve top`` draws).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlx_agent.records.front import ModelWindow

WINDOW_S = 60


@dataclass
class Bucket:
    """One second's counts."""

    second: int = -1  # the second (of the ring's clock) it counts; -1 unused
    tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    requests: int = 0
    ttft_sum: float = 0.0
    ttft_count: int = 0
    prefill_tokens: int = 0

    def clear(self, second: int) -> None:
        """Empty the bucket for ``second``."""
        for f in fields(self):
            setattr(self, f.name, f.default)
        self.second = second


class Ring:
    """A model's last ``size`` seconds."""

    def __init__(self, size: int = WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.clock = clock
        self.started = clock()
        self.buckets = [Bucket() for _ in range(size)]

    def _bucket(self, now: float) -> Bucket:
        second = int(now)
        bucket = self.buckets[second % self.size]
        if bucket.second != second:
            bucket.clear(second)
        return bucket

    def tokens(self, count: int = 1) -> None:
        """Count completion tokens written now."""
        self._bucket(self.clock()).tokens += count

    def prefill(self, count: int) -> None:
        """Count prompt tokens the worker read now."""
        if count > 0:
            self._bucket(self.clock()).prefill_tokens += count

    def request(self, prompt: int | None, cached: int | None, ttft: float | None) -> None:
        """Count a request that ended now, with its prompt and cached tokens and its time to first token."""
        bucket = self._bucket(self.clock())
        bucket.requests += 1
        bucket.prompt_tokens += prompt or 0
        bucket.cached_tokens += cached or 0
        if ttft is not None:
            bucket.ttft_sum += ttft
            bucket.ttft_count += 1

    def window(self) -> ModelWindow:
        """Return the last ``size`` seconds summed (module docstring)."""
        now = self.clock()
        current = int(now)
        seconds = max(1.0, min(float(self.size), now - self.started))
        live = [b for b in self.buckets if current - self.size < b.second <= current]
        series = [0] * self.size
        for b in live:
            series[self.size - 1 - (current - b.second)] = b.tokens
        tokens = sum(b.tokens for b in live)
        prompt = sum(b.prompt_tokens for b in live)
        cached = sum(b.cached_tokens for b in live)
        ttft_count = sum(b.ttft_count for b in live)
        return {
            "seconds": round(seconds, 1),
            "requests": sum(b.requests for b in live),
            "completion_tokens": tokens,
            "tokens_per_second": round(tokens / seconds, 2),
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "cache_hit_share": None if prompt == 0 else round(cached / prompt, 4),
            "ttft_ms": None if ttft_count == 0 else round(sum(b.ttft_sum for b in live) / ttft_count * 1000, 1),
            "prefill_tokens_per_second": round(sum(b.prefill_tokens for b in live) / seconds, 2),
            "tokens_series": series,
        }


class Samples:
    """Every model's ring, by served name (made on first use)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.rings: dict[str, Ring] = {}

    def ring(self, model: str) -> Ring:
        """Return ``model``'s ring."""
        ring = self.rings.get(model)
        if ring is None:
            ring = self.rings[model] = Ring(clock=self.clock)
        return ring
