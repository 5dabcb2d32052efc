"""A stream's tokens counted into its model's one-second samples, as the front's per-token path records them."""

from __future__ import annotations

import pytest

from mlx_agent.gateway.observe.request_log import Exchange
from mlx_agent.gateway.observe.samples import Samples
from mlx_agent.gateway.openai.passthrough import PassThrough
from mlx_agent.gateway.request import PreparedRequest
from mlx_agent.gateway.sse import Events, PumpResult

pytestmark = pytest.mark.fast


class Clock:
    """A clock the test sets by hand."""

    now = 500.0

    def __call__(self) -> float:
        """Return the time now."""
        return self.now


def chunk(text: str) -> bytes:
    """Return one streamed chat chunk as the worker writes it."""
    return b'data: {"model": "default_model", "choices": [{"delta": {"content": "' + text.encode() + b'"}}]}\n\n'


def test_each_token_lands_in_its_models_ring() -> None:
    """Every data event counts one token in the ring of the model the request was routed to, second by second."""
    clock = Clock()
    samples = Samples(clock=clock)
    exchange = Exchange(started=0.0, wall=0.0, samples=samples)
    exchange.routed("org/a", True, None)
    for _ in range(3):
        exchange.token()
    clock.now += 1
    exchange.token()
    assert samples.ring("org/a").window()["tokens_series"][-2:] == [3, 1]
    assert exchange.streamed == 4


def test_a_request_routed_again_counts_in_the_new_models_ring() -> None:
    """A request routed to another model after its first token counts its later tokens there, not in the first's."""
    samples = Samples(clock=Clock())
    exchange = Exchange(started=0.0, wall=0.0, samples=samples)
    exchange.routed("org/a", True, None)
    exchange.token()
    exchange.routed("org/b", True, None)
    exchange.token()
    exchange.token()
    assert samples.ring("org/a").window()["tokens_series"][-1] == 1
    assert samples.ring("org/b").window()["tokens_series"][-1] == 2


def test_events_split_across_reads_and_joined_in_one_are_all_forwarded() -> None:
    """Events cut across reads, several in one read, and one per read all reach the client once, each counted."""
    samples = Samples(clock=Clock())
    exchange = Exchange(started=0.0, wall=0.0, samples=samples)
    exchange.routed("org/a", True, None)
    prepared = PreparedRequest(body={}, stream=True, client_model="org/a", worker_model="default_model")
    events = Events(PassThrough(prepared, None), PumpResult(), exchange)
    one, two, three = chunk("a"), chunk("b"), chunk("c")
    out = [events.feed(one), events.feed(two[:7]), events.feed(two[7:] + three), events.feed(b"data: [DONE]\n\n")]
    renamed = [c.replace(b'"default_model"', b'"org/a"') for c in (one, two, three)]
    assert out == [renamed[0], b"", renamed[1] + renamed[2], b"data: [DONE]\n\n"]
    assert exchange.streamed == 3
    assert events.pending == b""
