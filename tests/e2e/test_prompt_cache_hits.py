"""End to end: an agent's next turn reads the previous turn's whole prompt from the worker's cache, on every API.

The shared front over the real wrapped worker on the tiny model (``tiny_front``). Each conversation sends a
first turn, then a second that repeats it with the reply, a late system message (a reminder) and a new user
message, at another temperature, then a third with other per-request template arguments; streamed and
non-streamed alike, through chat completions, Anthropic Messages and OpenAI Responses. Each later turn's cached
tokens must cover the whole prompt of the turn before, as ``usage`` reports it and as the front's metrics count
it (from where the shared front stands when the test begins).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.api_turns import APIS, turn
from tests.gateway_support import Gateway

pytestmark = pytest.mark.e2e

SYSTEM = "You work in a repository: read files, run commands and edit with care. " * 12


@pytest.fixture
def front(tiny_front: Gateway) -> Gateway:
    """Return the shared front over the real worker on the tiny model (each test counts from where it stands)."""
    return tiny_front


def template_args(api: str) -> dict[str, Any]:
    """Return per-request template arguments as each API carries them."""
    if api == "chat":
        return {"chat_template_kwargs": {"enable_thinking": False}}
    if api == "messages":
        return {"thinking": {"type": "disabled"}}
    return {"reasoning": {"effort": "low"}}


def cached_metric(front: Gateway) -> float:
    """Return the front's count of prompt tokens read from the cache, for the served model."""
    text = front.request("GET", "/metrics").body.decode()
    found = re.findall(r'^mlx_agent_cached_prompt_tokens_total\{[^}]*model="org/tiny"[^}]*\} (\S+)$', text, re.M)
    return sum(float(value) for value in found)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("api", APIS)
def test_each_turn_reads_the_previous_prompt_from_the_cache(front: Gateway, api: str, stream: bool) -> None:
    """Turn 2 (reply, late reminder, new temperature) and turn 3 (template arguments) hit all of the prompt before."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"{api} {stream}. {SYSTEM}"},
        {"role": "user", "content": "Look at the repository and tell me what it does."},
    ]
    before = cached_metric(front)
    first, _, reply = turn(front, api, stream, messages, temperature=0)
    messages += [
        {"role": "assistant", "content": reply or "ok"},
        {"role": "system", "content": "Reminder: 9000 tokens left."},
        {"role": "user", "content": "Now read the tests."},
    ]
    second, cached, reply = turn(front, api, stream, messages, temperature=0.7)
    assert second > first and cached >= first, (first, second, cached)
    messages += [{"role": "assistant", "content": reply or "ok"}, {"role": "user", "content": "And the docs?"}]
    third, cached_third, _ = turn(front, api, not stream, messages, temperature=0, **template_args(api))
    assert third > second and cached_third >= second, (second, third, cached_third)
    assert cached_metric(front) - before >= cached + cached_third
