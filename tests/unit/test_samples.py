"""The one-second samples behind the last-minute windows of status and ``serve top``."""

from __future__ import annotations

import pytest

from mlx_agent.gateway.observe.samples import WINDOW_S, Ring

pytestmark = pytest.mark.fast


class Clock:
    """A clock the test moves by hand (the ring's own clock parameter)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        """Return the time now."""
        return self.now


def test_window_sums_rates_and_shares() -> None:
    """Tokens, prompt and cached tokens, requests and TTFTs of the window are summed into rates and shares."""
    clock = Clock()
    ring = Ring(clock=clock)
    clock.now += 10  # a front 10 s old divides by 10, not by the whole window
    ring.tokens(30)
    ring.request(prompt=100, cached=25, ttft=0.2)
    clock.now += 1
    ring.tokens(20)
    ring.request(prompt=100, cached=75, ttft=0.4)
    ring.prefill(200)
    window = ring.window()
    assert window["seconds"] == 11
    assert window["completion_tokens"] == 50
    assert window["tokens_per_second"] == round(50 / 11, 2)
    assert window["cache_hit_share"] == 0.5
    assert window["ttft_ms"] == 300.0
    assert window["requests"] == 2
    assert window["prefill_tokens_per_second"] == round(200 / 11, 2)
    assert window["tokens_series"][-2:] == [30, 20] and len(window["tokens_series"]) == WINDOW_S


def test_old_seconds_leave_the_window() -> None:
    """A second older than the window is no longer counted, and its bucket is emptied before it is reused."""
    clock = Clock()
    ring = Ring(clock=clock)
    ring.tokens(7)
    ring.request(prompt=10, cached=10, ttft=None)
    clock.now += WINDOW_S  # the same bucket, a whole window later
    assert ring.window()["completion_tokens"] == 0
    ring.tokens(3)
    window = ring.window()
    assert window["completion_tokens"] == 3 and window["seconds"] == WINDOW_S
    assert window["cache_hit_share"] is None and window["ttft_ms"] is None and window["requests"] == 0


def test_a_usage_correction_is_counted_in_the_current_second() -> None:
    """A stream whose events outnumbered its tokens is corrected by a negative count, summing to the usage's."""
    clock = Clock()
    ring = Ring(clock=clock)
    ring.tokens(5)
    clock.now += 1
    ring.tokens(-1)
    assert ring.window()["completion_tokens"] == 4
