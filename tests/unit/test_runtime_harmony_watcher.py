"""The reply watcher on a Harmony vocabulary: the analysis channel is the thinking the limits apply to.

A toy vocabulary spells Harmony's markers one token each. Bare mlx_lm has no limits at all, and without the
Harmony vocabulary the watcher would see no thinking in a gpt-oss reply (mlx_lm knows no think markers for it).
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from mlx_agent.runtime.reply.watcher import ReplyWatcher, Vocabulary
from mlx_agent.runtime.serving.limits import Limits

EOS, CHANNEL, ANALYSIS, MESSAGE, END, START, ASSISTANT, FINAL, WORD, WAIT, COMMENTARY = range(11)
PIECES = {
    EOS: "",
    CHANNEL: "<|channel|>",
    ANALYSIS: "analysis",
    MESSAGE: "<|message|>",
    END: "<|end|>",
    START: "<|start|>",
    ASSISTANT: "assistant",
    FINAL: "final",
    WORD: " word",
    WAIT: " Wait,",
    COMMENTARY: "commentary",
}
THINKING = (CHANNEL, ANALYSIS, MESSAGE)
ANSWER_HEADER = (START, ASSISTANT, CHANNEL, FINAL, MESSAGE)
VOCAB = Vocabulary(
    width=16, eos=(EOS,), think_start=THINKING, think_end=(END,), piece=PIECES.__getitem__, answer_header=ANSWER_HEADER
)
PROMPT = [START, ASSISTANT]
NO_TEXT = Limits(hedge_limit=0, repeat_limit=0)


def run(watcher: ReplyWatcher, script: Callable[[list[int]], int], steps: int) -> list[int]:
    """Generate greedily for ``steps`` tokens, the model wanting ``script(reply so far)``; return the reply."""
    reply: list[int] = []
    for _ in range(steps):
        row = [0.0] * VOCAB.width
        row[script(reply)] = 5.0
        logits = watcher(mx.array(PROMPT + reply), mx.array([row]))
        token = int(str(mx.argmax(logits, axis=-1).item()))
        reply.append(token)
        if token == EOS:
            break
    return reply


def writes(opening: list[int], then: int) -> Callable[[list[int]], int]:
    """Return a model that writes ``opening``, then ``then`` for ever."""
    return lambda reply: opening[len(reply)] if len(reply) < len(opening) else then


def test_the_budget_counts_analysis_tokens_and_the_final_header_is_forced() -> None:
    """After the budget, ``<|end|>`` and the final channel's header are forced; then the model writes freely."""
    watcher = ReplyWatcher(VOCAB, Limits(reasoning_budget=4, hedge_limit=0, repeat_limit=0), 64, thinking_open=False)
    reply = run(watcher, writes(list(THINKING), WORD), 14)
    assert reply == [*THINKING, WORD, WORD, WORD, WORD, END, *ANSWER_HEADER, WORD]
    assert watcher.phase == "answer" and watcher.cut is None


def test_a_message_after_the_analysis_is_left_to_the_model() -> None:
    """A model that ends its analysis itself and writes a call gets nothing forced."""
    call = [*THINKING, WORD, END, START, ASSISTANT, CHANNEL, COMMENTARY, MESSAGE]
    watcher = ReplyWatcher(VOCAB, Limits(reasoning_budget=10, hedge_limit=0, repeat_limit=0), 64, thinking_open=False)
    assert run(watcher, writes(call, WORD), 14) == [*call, *[WORD] * (14 - len(call))]


def test_analysis_after_a_preamble_is_watched_too() -> None:
    """A reply may think again after a commentary message: its hedging analysis is closed like the first."""
    preamble = [CHANNEL, COMMENTARY, MESSAGE, WORD, END, START, ASSISTANT, *THINKING]
    watcher = ReplyWatcher(VOCAB, Limits(hedge_limit=3, repeat_limit=0), 64, thinking_open=False)
    reply = run(watcher, writes(preamble, WAIT), 40)
    closed = reply.index(FINAL) - len(ANSWER_HEADER) + 2  # where <|end|> was forced
    assert reply[closed - 1] == END and reply[closed : closed + len(ANSWER_HEADER)] == list(ANSWER_HEADER)
    assert reply[len(preamble) : closed - 1] == [WAIT] * (closed - 1 - len(preamble))


def test_the_answer_reserve_leaves_room_for_the_header() -> None:
    """Thinking that runs on is closed a quarter of max_tokens before the end, header and all."""
    watcher = ReplyWatcher(VOCAB, NO_TEXT, 32, thinking_open=False)
    reply = run(watcher, writes(list(THINKING), WORD), 32)
    assert reply.index(END) == 24
    assert reply[25:30] == list(ANSWER_HEADER)


def test_a_prompt_that_opened_the_analysis_starts_in_thinking() -> None:
    """A prompt ending inside the analysis channel (a continued message) is thinking from the first token."""
    watcher = ReplyWatcher(VOCAB, Limits(reasoning_budget=2, hedge_limit=0, repeat_limit=0), 64, thinking_open=True)
    assert run(watcher, writes([], WORD), 9) == [WORD, WORD, END, *ANSWER_HEADER, WORD]
