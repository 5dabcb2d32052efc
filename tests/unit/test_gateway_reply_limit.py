"""Reply limits without a planned default, and what the front records when a request's own limit is lowered."""

from __future__ import annotations

import time

import pytest

from mlx_agent.gateway.observe.limit_notice import LOWERED_HEADER, lowered_headers, with_granted_output, worker_granted
from mlx_agent.gateway.observe.request_log import Exchange
from mlx_agent.gateway.request import prepare
from mlx_agent.wire import GRANTED_MAX_TOKENS_HEADER
from tests.unit.request_bodies import chat, model

pytestmark = pytest.mark.fast


def test_no_planned_default_gives_the_ceiling_then_the_window_then_the_workers_own() -> None:
    """max_tokens None in the plan: a request without a limit gets the ceiling, else the window, else none is sent."""
    assert prepare(chat(), model=model(max_tokens=None, max_tokens_ceiling=3000)).body["max_tokens"] == 3000
    windowed = prepare(chat(), model=model(max_tokens=None, context_window=8192))
    assert windowed.body["max_tokens"] == 8192 and windowed.requested_max_tokens is None
    unknown = prepare(chat(), model=model(max_tokens=None))
    assert "max_tokens" not in unknown.body  # nothing is known: the worker's own default applies
    own = prepare(chat(max_tokens=32000), model=model(max_tokens=None, max_tokens_ceiling=3000))
    assert (own.body["max_tokens"], own.requested_max_tokens) == (3000, 32000)
    assert prepare(chat(), model=model(max_tokens=512)).body["max_tokens"] == 512


def test_a_lowered_limit_is_told_only_when_below_the_clients_own() -> None:
    """The worker's cut counts when it is below what the front sent; only a client's own limit can be lowered."""
    exchange = Exchange(time.perf_counter(), time.time())
    exchange.limits(32000, 32000)
    assert lowered_headers(exchange) == {}
    worker_granted(exchange, {GRANTED_MAX_TOKENS_HEADER: "1500"})
    assert lowered_headers(exchange) == {LOWERED_HEADER: "32000->1500"}
    worker_granted(exchange, {GRANTED_MAX_TOKENS_HEADER: "9000"})  # never raised again
    worker_granted(exchange, {GRANTED_MAX_TOKENS_HEADER: "many"})  # a header that is not a number is ignored
    assert exchange.max_tokens == 1500
    assert with_granted_output({"max_output_tokens": 32000}, exchange) == {"max_output_tokens": 1500}
    unasked = Exchange(time.perf_counter(), time.time())
    unasked.limits(None, 8192)
    worker_granted(unasked, {GRANTED_MAX_TOKENS_HEADER: "700"})
    assert unasked.max_tokens == 700 and not unasked.limit_lowered and lowered_headers(unasked) == {}
    assert with_granted_output({"max_output_tokens": None}, unasked) == {"max_output_tokens": None}
