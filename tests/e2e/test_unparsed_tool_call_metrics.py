"""A tool call no parser can read is never silent: the front's /metrics counts it, per model, through every API.

The model is scripted (``test_wrapped_tool_calls.tool_caller``) to answer with a ``json_tools`` call cut off
mid-arguments, which its parser cannot read; the real worker returns it as text with the ``unparsed_tool_calls``
marker, and the front counts each such call in ``mlx_agent_unparsed_tool_calls_total{model=...}``, from a plain
reply, from a stream's chunks, and from a reply it translates (Anthropic Messages).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.tool_call_models import BROKEN, TOOLS, tool_caller
from tests.gateway_support import Gateway, real_worker_argv, running_gateway

pytestmark = pytest.mark.e2e

COUNTER = 'mlx_agent_unparsed_tool_calls_total{model="org/tiny"}'


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Serve the model whose tool call does not parse from the real worker behind the front."""
    model: Path = tool_caller(tmp_path_factory.mktemp("broken") / "model", BROKEN)
    with running_gateway(tmp_path_factory.mktemp("front"), real_worker_argv(model, 16), model_path=model) as gateway:
        yield gateway


def counted(front: Gateway) -> float | None:
    """Return the model's unparsed tool-call counter from /metrics (None while it has no series)."""
    text = front.request("GET", "/metrics").body.decode()
    lines = [line for line in text.splitlines() if line.startswith(COUNTER)]
    return float(lines[0].split()[-1]) if lines else None


def settled(front: Gateway, wanted: float) -> float | None:
    """Return the counter once it reads ``wanted`` (a request is recorded as its handler ends), or as it is at 30 s."""
    deadline = time.monotonic() + 30
    while (value := counted(front)) != wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def test_each_unparsed_call_is_counted_in_metrics(front: Gateway) -> None:
    """A plain reply, a stream and an Anthropic reply with an unreadable call each add one to the model's counter."""
    assert counted(front) is None
    plain = front.chat("What time is it?", tools=TOOLS, max_tokens=16)
    assert plain.status == 200 and plain.json()["choices"][0]["message"]["unparsed_tool_calls"], plain.body
    assert settled(front, 1) == 1
    streamed = front.chat("What time is it?", tools=TOOLS, max_tokens=16, stream=True)
    assert streamed.status == 200 and b"unparsed_tool_calls" in streamed.body
    assert settled(front, 2) == 2
    anthropic_tools = [{"name": "get_time", "description": "Now.", "input_schema": TOOLS[0]["function"]["parameters"]}]
    translated = front.request(
        "POST",
        "/v1/messages",
        {
            "model": "org/tiny",
            "max_tokens": 16,
            "tools": anthropic_tools,
            "messages": [{"role": "user", "content": "What time is it?"}],
        },
    )
    assert translated.status == 200, translated.body
    assert settled(front, 3) == 3
