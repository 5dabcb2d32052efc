"""The reply watcher as mlx_lm drives it: a token history and a row of logits per step, on a toy vocabulary."""

from __future__ import annotations

import logging
from typing import Any

import mlx.core as mx
import pytest

from mlx_agent.runtime.reply.watcher import CHECK_EVERY, ReplyWatcher, Vocabulary
from mlx_agent.runtime.serving.limits import Limits

EOS, THINK, UNTHINK, WAIT, WORD = 0, 1, 2, 3, 4
PIECES = {EOS: "", THINK: "<think>", UNTHINK: "</think>", WAIT: " Wait,", WORD: " word"}
VOCAB = Vocabulary(width=8, eos=(EOS,), think_start=(THINK,), think_end=(UNTHINK,), piece=PIECES.__getitem__)
PROMPT = [7, 7, 7]
NO_TEXT = Limits(hedge_limit=0, repeat_limit=0)


def favourite(token: int) -> Any:
    """Return logits that make ``token`` the model's own choice."""
    row = [0.0] * VOCAB.width
    row[token] = 5.0
    return mx.array([row])


def run(watcher: ReplyWatcher, wants: int, steps: int) -> list[int]:
    """Generate greedily for ``steps`` tokens while the model always wants ``wants``; return the reply."""
    reply: list[int] = []
    for _ in range(steps):
        logits = watcher(mx.array(PROMPT + reply), favourite(wants))
        token = int(str(mx.argmax(logits, axis=-1).item()))
        reply.append(token)
        if token == EOS:
            break
    return reply


def test_a_reasoning_budget_forces_the_end_of_thinking() -> None:
    """After the budget the end-of-thinking token is forced, and then the model is free again."""
    watcher = ReplyWatcher(VOCAB, Limits(reasoning_budget=5, hedge_limit=0, repeat_limit=0), 64, thinking_open=True)
    assert run(watcher, WORD, 8) == [WORD] * 5 + [UNTHINK, WORD, WORD]
    assert watcher.phase == "answer" and watcher.cut is None


def test_the_answer_reserve_closes_thinking_without_a_budget() -> None:
    """With 16 tokens in all, the thinking ends at 12 so a quarter is left to answer."""
    watcher = ReplyWatcher(VOCAB, NO_TEXT, 16, thinking_open=True)
    assert run(watcher, WORD, 16).index(UNTHINK) == 12


def test_hedging_thinking_is_closed_at_a_check() -> None:
    """Thinking that says " Wait," too often is closed at the next check."""
    watcher = ReplyWatcher(VOCAB, Limits(hedge_limit=3, repeat_limit=0), 64, thinking_open=True)
    assert run(watcher, WAIT, CHECK_EVERY + 2) == [WAIT] * CHECK_EVERY + [UNTHINK, WAIT]


def test_an_answer_is_ended_only_with_limit_answers() -> None:
    """A hedging plain answer gets EOS when answers are watched, and runs on when they are not."""
    watched = ReplyWatcher(VOCAB, Limits(hedge_limit=3, repeat_limit=0, limit_answers=True), 64, thinking_open=False)
    assert run(watched, WAIT, 20) == [WAIT] * CHECK_EVERY + [EOS]
    assert watched.cut == "second-guessed itself 8 times"
    free = ReplyWatcher(VOCAB, Limits(hedge_limit=3, repeat_limit=0), 64, thinking_open=False)
    assert run(free, WAIT, 20) == [WAIT] * 20


def test_a_cut_thinking_cannot_be_opened_again() -> None:
    """Once the budget closed the thinking, the model may not open another thinking block."""
    watcher = ReplyWatcher(VOCAB, Limits(reasoning_budget=2, hedge_limit=0, repeat_limit=0), 64, thinking_open=True)
    assert THINK not in run(watcher, THINK, 6)[3:]


def test_without_a_schema_the_history_is_read_only_at_checks() -> None:
    """An unconstrained watcher does not read the newest token each step (it would stall mlx_lm's pipeline)."""

    class History:
        """A history that counts how often its tokens are read."""

        def __init__(self, length: int) -> None:
            self.shape = (length,)
            self.reads = 0

        def reshape(self, *_: Any) -> Any:
            self.reads += 1
            return mx.array(PROMPT + [WORD] * (self.shape[0] - len(PROMPT)))

    watcher = ReplyWatcher(VOCAB, Limits(hedge_limit=3, repeat_limit=3, limit_answers=True), 64, thinking_open=False)
    histories = [History(len(PROMPT) + n) for n in range(4 * CHECK_EVERY)]
    for history in histories:
        watcher(history, favourite(WORD))
    assert sum(h.reads for h in histories) <= 5


def test_taken_back_tokens_take_their_effects_back() -> None:
    """With a draft model the history can shrink: the phase returns to what it was before those tokens."""
    watcher = ReplyWatcher(VOCAB, NO_TEXT, 64, thinking_open=True, verify_history=True)
    watcher(mx.array(PROMPT), favourite(WORD))
    watcher(mx.array([*PROMPT, WORD, UNTHINK]), favourite(WORD))
    assert watcher.phase == "answer"
    watcher(mx.array([*PROMPT, WORD, WORD]), favourite(WORD))
    assert watcher.phase == "thinking"


def test_a_failing_watcher_steps_aside(caplog: pytest.LogCaptureFixture) -> None:
    """A bug in the watcher is logged and the logits pass through: it must never kill generation."""
    watcher = ReplyWatcher(VOCAB, NO_TEXT, 64, thinking_open=True)
    logits = favourite(WORD)
    with caplog.at_level(logging.ERROR):
        assert watcher("not an array", logits) is logits
    assert "failed" in caplog.text
    assert watcher(mx.array(PROMPT), logits) is logits
