"""Reply limits through the wrapped server: reasoning_budget, hedge_limit, repeat_limit and limit_answers.

The model is scripted (see wrapped_support): after its prompt it writes " Wait," for ever, in its
thinking or in its answer, and after ``</think>`` it writes " Done" and ends. So a reply only answers if a
limit closes its thinking, and a plain answer only ends early if a limit cuts it. Bare mlx_lm.server has no
limits: every reply here would run to max_tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.contract_support import contract
from tests.e2e.wrapped_support import Server, running, scripted_model
from tests.fixtures.tiny_model import CHAT_TEMPLATE

pytestmark = pytest.mark.e2e

# ChatML that opens the thinking unless the request turns thinking off (as Qwen3-style templates do).
SWITCHED_TEMPLATE = CHAT_TEMPLATE.replace(
    "{{- '<|im_start|>assistant\\n' }}",
    "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is not defined or enable_thinking %}"
    "{{- '<think>\\n' }}{%- endif %}",
)
NO_TEXT_LIMITS: dict[str, Any] = {"hedge_limit": 0, "repeat_limit": 0}
NO_THINKING: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}
NOTE = {
    "type": "object",
    "properties": {"note": {"type": "string"}},
    "required": ["note"],
    "additionalProperties": False,
}


def build_waiter(directory: Path) -> Path:
    """Build the scripted thinking model that hedges for ever (module docstring)."""
    return scripted_model(
        directory,
        {"</think>": " Done", " Done": "<|im_end|>", " Wait,": " Wait,"},
        " Wait,",
        special=["<think>", "</think>"],
        plain=[" Wait,", " Done"],
        template=SWITCHED_TEMPLATE,
    )


@pytest.fixture(scope="module")
def waiter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return the scripted model, built once for this module."""
    return build_waiter(tmp_path_factory.mktemp("waiter") / "model")


@pytest.fixture(scope="module")
def server(waiter: Path) -> Iterator[Server]:
    """Serve the scripted model with the server's default limits."""
    with running(waiter, waiter.parent) as started:
        yield started


def chat(server: Server, max_tokens: int = 64, **fields: Any) -> dict[str, Any]:
    """Ask the scripted model one question; return the choice."""
    status, answer = server.post({"messages": [{"role": "user", "content": "Go"}], "max_tokens": max_tokens, **fields})
    assert status == 200, answer
    choice: dict[str, Any] = answer["choices"][0]
    choice["usage"] = answer["usage"]
    return choice


def waits(text: str | None) -> int:
    """Return how many hedges the scripted model wrote."""
    return (text or "").count("Wait,")


def test_reasoning_budget_closes_the_thinking_and_the_model_answers(server: Server) -> None:
    """After reasoning_budget thinking tokens the thinking is closed and the model writes its answer."""
    choice = chat(server, reasoning_budget=6, **NO_TEXT_LIMITS)
    assert waits(choice["message"]["reasoning"]) == 6
    assert (choice["message"]["content"].strip(), choice["finish_reason"]) == ("Done", "stop")


def test_a_thinking_model_keeps_a_reserve_to_answer(server: Server) -> None:
    """Without a budget, the thinking is still closed a quarter of max_tokens before the end."""
    choice = chat(server, max_tokens=40, **NO_TEXT_LIMITS)
    assert waits(choice["message"]["reasoning"]) == 30
    assert choice["message"]["content"].strip() == "Done"


def test_hedging_closes_the_thinking(server: Server) -> None:
    """Thinking that second-guesses itself hedge_limit times is closed, and the model answers."""
    choice = chat(server, hedge_limit=4, repeat_limit=0)
    assert 4 <= waits(choice["message"]["reasoning"]) <= 8
    assert choice["message"]["content"].strip() == "Done"
    assert "second-guessed itself" in server.log()


def test_a_loop_closes_the_thinking(server: Server) -> None:
    """Thinking that ends with the same run of tokens repeat_limit times in a row is closed."""
    choice = chat(server, hedge_limit=0, repeat_limit=3)
    assert 9 <= waits(choice["message"]["reasoning"]) <= 16
    assert choice["message"]["content"].strip() == "Done"
    assert "tokens 3 times in a row" in server.log()


def test_answers_are_watched_only_with_limit_answers(server: Server) -> None:
    """A hedging answer runs on by default; with limit_answers it is ended and reported as "length"."""
    free = chat(server, hedge_limit=4, **NO_THINKING)
    assert free["usage"]["completion_tokens"] == 64
    cut = chat(server, hedge_limit=4, limit_answers=True, **NO_THINKING)
    assert cut["finish_reason"] == "length"
    assert 4 <= cut["usage"]["completion_tokens"] <= 9
    assert cut["message"]["content"].strip().startswith("Wait,")


def test_a_cut_json_answer_closes_its_string_and_validates(server: Server) -> None:
    """A JSON answer cut by a limit closes the string it is writing, so the document still validates."""
    choice = chat(
        server,
        max_tokens=200,
        hedge_limit=3,
        limit_answers=True,
        response_format={"type": "json_schema", "json_schema": {"name": "note", "schema": NOTE}},
        **NO_THINKING,
    )
    document = json.loads(choice["message"]["content"])
    jsonschema.validate(document, NOTE)
    assert waits(document["note"]) >= 3
    assert choice["finish_reason"] == "length"
    assert choice["usage"]["completion_tokens"] < 40


@pytest.mark.parametrize(
    "field,value", [("reasoning_budget", -1), ("hedge_limit", 1.5), ("repeat_limit", "3"), ("limit_answers", "yes")]
)
def test_a_bad_limit_is_400(server: Server, field: str, value: Any) -> None:
    """A limit of the wrong type or sign is refused with a 400 naming the field."""
    status, answer = server.post({"messages": [{"role": "user", "content": "Go"}], field: value})
    assert status == 400
    assert answer["error"]["param"] == field


def test_the_planned_limits_are_the_defaults(waiter: Path) -> None:
    """The contract's reply limits set what a request naming no limit gets; a request field wins."""
    planned = contract(reasoning_budget=3, hedge_limit=0, repeat_limit=0, limit_answers=True)
    with running(waiter, waiter.parent, *planned) as flagged:
        assert waits(chat(flagged)["message"]["reasoning"]) == 3
        assert waits(chat(flagged, reasoning_budget=5)["message"]["reasoning"]) == 5
        log = flagged.log()
    assert "unrecognized arguments" not in log
