"""gpt-oss's Harmony channels in the wrapped worker itself: limits on the analysis, cut calls, text completions.

The models are ``tests.e2e.harmony_support``'s: a looping thinker (``Hmm, wait.`` on its analysis channel for
ever, then ``It is sunny in Paris.`` on the final channel once a limit closes the analysis), and the model
that thinks, says a preamble and calls ``get_weather``. The forms through every API of the front are in
``test_harmony_front``.

Against bare mlx_lm.server (0.32.2) each test fails: it knows no thinking for a Harmony tokenizer, so no limit
closes the analysis (the looping reply runs to ``max_tokens`` and comes back as content with its markup), it
splits no channels, and it files no Harmony call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.contract_support import LOOKUP
from tests.e2e.harmony_support import (
    ANSWER,
    FINAL_HEADER,
    FORMS,
    HEDGE,
    LOOPING_THINKER,
    PARIS,
    PREAMBLE,
    QUESTION,
    THOUGHT,
    WEATHER_TOOL,
    harmony_model,
)
from tests.e2e.wrapped_support import Server, running

pytestmark = pytest.mark.e2e
NO_TEXT_LIMITS: dict[str, Any] = {"hedge_limit": 0, "repeat_limit": 0}
CALLER = FORMS["preamble_then_call"]
ASK = {"messages": CALLER.messages, "tools": [WEATHER_TOOL], "max_tokens": 32}


@pytest.fixture(scope="module")
def looper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Serve the looping thinker."""
    model = harmony_model(tmp_path_factory.mktemp("looper") / "model", LOOPING_THINKER)
    with running(model, model.parent) as server:
        yield server


@pytest.fixture(scope="module")
def caller_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the model that thinks, says a preamble, and calls get_weather."""
    return harmony_model(tmp_path_factory.mktemp("caller") / "model", CALLER.chain)


@pytest.fixture(scope="module")
def caller(caller_model: Path) -> Iterator[Server]:
    """Serve the calling model."""
    with running(caller_model, caller_model.parent) as server:
        yield server


def chat(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    """Send one chat request; return its choice."""
    status, answer = server.post(body)
    assert status == 200, answer
    choice: dict[str, Any] = answer["choices"][0]
    return choice


def streamed(server: Server, body: dict[str, Any]) -> tuple[dict[str, str], str]:
    """Send one streamed chat request; return the joined text fields of its deltas and the finish reason."""
    status, answer = server.post({**body, "stream": True})
    assert status == 200, answer
    chunks = [json.loads(line[len("data: ") :]) for line in answer.splitlines() if line.startswith("data: {")]
    joined: dict[str, str] = {}
    for chunk in chunks:
        for key, value in chunk["choices"][0]["delta"].items():
            if isinstance(value, str) and key != "role":
                joined[key] = joined.get(key, "") + value
    return joined, chunks[-1]["choices"][0]["finish_reason"]


def test_the_reasoning_budget_closes_the_analysis_and_the_model_answers(looper: Server) -> None:
    """After reasoning_budget analysis tokens the final header is forced, and the model answers on that channel."""
    body = {"messages": QUESTION, "max_tokens": 40, "reasoning_budget": 3, **NO_TEXT_LIMITS}
    message = chat(looper, body)["message"]
    assert (message["reasoning"], message["content"]) == (HEDGE * 3, ANSWER)
    assert streamed(looper, body) == ({"reasoning": HEDGE * 3, "content": ANSWER}, "stop")
    assert "spent its reasoning budget of 3 tokens" in looper.log()


def test_hedging_on_the_analysis_channel_closes_it(looper: Server) -> None:
    """Analysis that second-guesses itself past hedge_limit is closed at a check, and the model answers."""
    message = chat(looper, {"messages": QUESTION, "max_tokens": 64, "hedge_limit": 6, "repeat_limit": 0})["message"]
    assert 3 <= message["reasoning"].count(HEDGE) <= 8 and message["content"] == ANSWER
    assert "second-guessed itself" in looper.log()


def test_the_analysis_keeps_a_reserve_for_the_answer(looper: Server) -> None:
    """Without a budget, the analysis is closed a quarter of max_tokens before the end, and the answer fits."""
    message = chat(looper, {"messages": QUESTION, "max_tokens": 40, **NO_TEXT_LIMITS})["message"]
    assert message["reasoning"] == HEDGE * 27  # 40 - a reserve of 10, less the 3 tokens of the analysis header
    assert message["content"] == ANSWER


def test_a_schema_holds_the_final_channel_after_the_analysis(looper: Server) -> None:
    """With json_object, the model thinks, the final header is forced, and the final channel is JSON."""
    body = {"messages": QUESTION, "max_tokens": 48, "reasoning_budget": 2, "response_format": {"type": "json_object"}}
    message = chat(looper, body)["message"]
    assert message["reasoning"] == HEDGE * 2
    assert isinstance(json.loads(message["content"]), dict)


def test_a_call_cut_by_max_tokens_comes_back_as_written(caller: Server) -> None:
    """A reply cut inside a Harmony call returns the call as text with the unparsed marker, not a broken call."""
    choice = chat(caller, {**ASK, "max_tokens": 9})  # the reply stops just before its <|call|>
    message = choice["message"]
    written = f"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{PARIS}"
    assert (message["reasoning"], message["content"]) == (THOUGHT, PREAMBLE + written)
    [marker] = message["unparsed_tool_calls"]
    assert marker["text"] == written and "max_tokens" in marker["error"]
    assert "tool_calls" not in message and choice["finish_reason"] == "length"


def test_a_text_completion_is_left_as_written(looper: Server) -> None:
    """/v1/completions is raw text in, raw text out: the channels stay in the text (the limits still apply)."""
    status, answer = looper.post(
        {"prompt": "<|start|>user<|message|>Hi<|end|><|start|>assistant", "max_tokens": 24, "reasoning_budget": 2},
        path="/v1/completions",
    )
    assert status == 200, answer
    assert answer["choices"][0]["text"] == f"<|channel|>analysis<|message|>{HEDGE * 2}<|end|>{FINAL_HEADER}{ANSWER}"


def split_of(message: dict[str, Any]) -> tuple[Any, ...]:
    """Return a message's reasoning, content and calls (name and arguments as written)."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return message.get("reasoning"), message["content"], calls


def test_prompt_lookup_leaves_the_split_unchanged(caller: Server, caller_model: Path) -> None:
    """With --prompt-lookup a watched Harmony reply takes lookup and splits the same as native generation."""
    with running(caller_model, caller_model.parent, *LOOKUP) as fast:
        looked_up = split_of(chat(fast, {**ASK, "temperature": 0})["message"])
        log = fast.wait_for_log(" prompt lookup: ")
    assert looked_up == split_of(chat(caller, ASK)["message"]) == (THOUGHT, PREAMBLE, [("get_weather", PARIS)])
    assert "keeps native generation" not in log
