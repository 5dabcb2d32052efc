"""Reply limits: the worker's defaults from its contract, request fields, and how hedges and loops are recognised."""

from __future__ import annotations

import dataclasses

import pytest

from mlx_agent.errors import HttpError
from mlx_agent.runtime.serving.limits import (
    Limits,
    answer_reserve,
    count_hedges,
    from_contract,
    limits_from_body,
    loop_length,
)
from tests.contract_support import PLAIN

pytestmark = pytest.mark.fast

PIECES = {1: " the", 2: " cat", 3: " sat", 4: "=", 5: ".", 6: " on"}


def piece(token: int) -> str:
    """Return the text of a token of the toy vocabulary."""
    return PIECES[token]


def test_the_contract_gives_the_defaults() -> None:
    """The worker's defaults are its contract's four fields; the plain contract's are the documented ones."""
    assert from_contract(PLAIN) == Limits(0, 12, 3, False) == Limits()
    changed = dataclasses.replace(PLAIN, reasoning_budget=9, hedge_limit=4, limit_answers=True)
    assert from_contract(changed) == Limits(reasoning_budget=9, hedge_limit=4, repeat_limit=3, limit_answers=True)


def test_request_fields_win_over_the_server_defaults() -> None:
    """A field the request names replaces the default; a missing or null one keeps it."""
    defaults = Limits(reasoning_budget=100, hedge_limit=5, repeat_limit=3, limit_answers=False)
    body = {"reasoning_budget": 0, "hedge_limit": None, "limit_answers": True}
    assert limits_from_body(body, defaults) == Limits(0, 5, 3, True)


@pytest.mark.parametrize(
    "field,value", [("reasoning_budget", -1), ("hedge_limit", True), ("repeat_limit", 2.0), ("limit_answers", 1)]
)
def test_a_bad_field_is_a_400_naming_it(field: str, value: object) -> None:
    """A limit of the wrong type or sign is refused with a 400 whose param names it."""
    with pytest.raises(HttpError) as refused:
        limits_from_body({field: value}, Limits())
    assert (refused.value.status, refused.value.param) == (400, field)


def test_hedges_are_doubts_not_the_word_wait() -> None:
    """Second-guessing phrases count; "wait" without punctuation after it does not."""
    text = "Wait, that is wrong. Hmm. Let me double-check. We wait for the lock. Actually, no. Hold on!"
    assert count_hedges(text) == 5


def test_a_loop_is_found_at_the_end() -> None:
    """A run of tokens written N times in a row at the end is a loop of that run's length."""
    tokens = [6, 2, *([1, 2, 3, 6, 1, 5] * 3)]  # " the cat sat on the." three times
    assert loop_length(tokens, 3, piece) == 6
    assert loop_length(tokens, 4, piece) == 0


def test_a_short_run_is_not_a_loop() -> None:
    """Repeated punctuation is too short to be a loop; it becomes one once the run is long enough."""
    assert loop_length([4] * 8, 3, piece) == 0
    assert loop_length([4] * 36, 3, piece) == 12


def test_the_answer_reserve_is_a_quarter_or_what_the_schema_needs() -> None:
    """A thinking model keeps a quarter of max_tokens for its answer, more if the schema needs more."""
    assert answer_reserve(400) == 100
    assert answer_reserve(40, least=30) == 30
    assert answer_reserve(8, least=30) == 7
