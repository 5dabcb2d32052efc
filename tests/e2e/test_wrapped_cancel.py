"""Disconnect cancellation through the wrapped server: a client that leaves stops its generation.

Bare mlx_lm.server never looks at the socket of a non-streaming reply and runs it to max_tokens for nobody;
it says nothing in its log. Here the log line names the reply, the tokens it had, and whether generation
went quiet; the bound on tokens generated after the stop stands in for "within a second" (no wall-time
assertions in tests; scripts/bench_wrapped_server.py measures the delay). mlx_lm drops a stopped reply after
its current time slice of up to half a second, so a few hundred tiny-model tokens may still come.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import openai
import pytest

from tests.e2e.wrapped_support import STOPPED, Server

pytestmark = pytest.mark.e2e

LONG = 20000  # tokens; tens of seconds for the tiny model, far beyond any client's patience here


@pytest.fixture
def server(wrapped_tiny: Server) -> Server:
    """Return the shared wrapped server on the random tiny model: each test counts stop lines from where it stands."""
    return wrapped_tiny


def stops(server: Server, seen: int, timeout: float = 30) -> tuple[str, int, int]:
    """Wait for the stop line after the first ``seen``; return (reply id, its tokens, tokens after the stop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = STOPPED.findall(server.log())
        if len(found) > seen:
            label, tokens, late = found[seen]
            return label, int(tokens), int(late)
        time.sleep(0.1)
    raise AssertionError(f"no new stop line in the log:\n{server.log()[-2000:]}")


def served_in_full(server: Server) -> bool:
    """Say whether a short reply is answered whole: the worker serves on after a client left (it is shared)."""
    status, answer = server.post({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    return (
        status == 200
        and answer["usage"]["completion_tokens"] == 4
        and answer["choices"][0]["finish_reason"] == "length"
    )


def test_a_non_streaming_client_that_leaves_stops_its_generation(server: Server) -> None:
    """A client that times out on a non-streaming reply gets its generation stopped, and the log says so."""
    seen = len(STOPPED.findall(server.log()))
    impatient = server.client(timeout=1.5)
    with pytest.raises(openai.APITimeoutError):
        impatient.chat.completions.create(
            model="default_model", max_tokens=LONG, messages=[{"role": "user", "content": "Talk for a long time"}]
        )
    label, tokens, late = stops(server, seen)
    assert label.startswith("chatcmpl-")
    assert tokens > 0 and tokens + late < LONG // 4
    assert served_in_full(server)


def test_a_streaming_client_that_leaves_stops_its_generation(server: Server) -> None:
    """A client that closes a stream after a few chunks gets its generation stopped, and the log says so."""
    seen = len(STOPPED.findall(server.log()))
    stream = server.client().chat.completions.create(
        model="default_model",
        max_tokens=LONG,
        stream=True,
        messages=[{"role": "user", "content": "Stream for a long time"}],
    )
    for index, _ in enumerate(stream):
        if index == 5:
            break
    stream.close()
    _, tokens, late = stops(server, seen)
    assert tokens >= 5 and tokens + late < LONG // 4
    assert served_in_full(server)


def test_other_requests_in_flight_are_unaffected(server: Server) -> None:
    """A reply running next to the one whose client left finishes in full."""
    seen = len(STOPPED.findall(server.log()))
    result: dict[str, Any] = {}

    def steady() -> None:
        reply = server.client().chat.completions.create(
            model="default_model", max_tokens=3000, messages=[{"role": "user", "content": "Keep going"}]
        )
        result["reply"] = reply

    neighbour = threading.Thread(target=steady)
    neighbour.start()
    with pytest.raises(openai.APITimeoutError):
        server.client(timeout=1.0).chat.completions.create(
            model="default_model", max_tokens=LONG, messages=[{"role": "user", "content": "Leave early"}]
        )
    stops(server, seen)
    assert neighbour.is_alive(), "the neighbour was in flight when the other client left"
    neighbour.join(timeout=120)
    reply = result["reply"]
    assert reply.usage.completion_tokens == 3000
    assert reply.choices[0].finish_reason == "length"
    assert served_in_full(server)
