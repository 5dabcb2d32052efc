"""Reply limits: how far a reply may go before the server cuts it short, and how a reply is judged.

Four settings, each a request field whose default is the model's plan (its per-model option, given to the worker
in its contract; docs/wrapped-server.md):

``reasoning_budget`` (``--reasoning-budget``, default 0 = none)
    A thinking model's thinking is closed after this many thinking tokens, and the model answers.
``hedge_limit`` (``--hedge-limit``, default 12; 0 = off)
    The watched text is cut once its newest ``HEDGE_WINDOW`` tokens second-guess themselves this many times
    ("wait,", "hmm", "let me re-check", ...).
``repeat_limit`` (``--repeat-limit``, default 3; 0 = off)
    The watched text is cut once it ends with the same run of tokens written this many times in a row
    (a loop); the run must hold at least ``MIN_LOOP_CHARS`` visible characters, so "====" is not a loop.
``limit_answers`` (``--limit-answers``, default off)
    Hedges and repeats are watched in the thinking only, unless this is on: answers repeat for honest
    reasons (a table, a refrain), thinking rarely does.

Independently of the budget, a thinking model's thinking is closed when only ``answer_reserve(max_tokens)``
tokens would be left, so a reply that thinks too long still answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mlx_agent.runtime.serving.errors_http import bad_request
from mlx_agent.wire import HEDGE_LIMIT, REASONING_BUDGET, REPEAT_LIMIT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.worker_contract import WorkerContract

# The judged text is the newest this many tokens: a loop says the same thing every few lines, while an
# honest long reply may say "wait" a dozen times over thousands of tokens.
HEDGE_WINDOW = 1024
# A loop's run of tokens is looked for up to this length.
MAX_LOOP_TOKENS = 256
MIN_LOOP_CHARS = 12

# Doubts a model voices about what it just wrote. "wait" counts only before punctuation, so
# "wait for the lock" does not.
HEDGE = re.compile(
    r"\b(?:no,\s*)?wait(?=\s*[,.!?;:\u2014\u2013-])"
    r"|\bhm+\b"
    r"|\bhold on\b"
    r"|\bon second thought\b"
    r"|\bactually,?\s+no\b"
    r"|\blet me (?:re-?check|double[- ]check|reconsider|re-?think|verify|re-?examine|re-?read|check again)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Limits:
    """The limits of one reply (or the server's defaults); 0 means no limit."""

    reasoning_budget: int = REASONING_BUDGET
    hedge_limit: int = HEDGE_LIMIT
    repeat_limit: int = REPEAT_LIMIT
    limit_answers: bool = False

    @property
    def watches_text(self) -> bool:
        """Whether hedges or loops are looked for at all."""
        return bool(self.hedge_limit or self.repeat_limit)


def from_contract(contract: WorkerContract) -> Limits:
    """Return the worker's defaults, as its model's plan set them."""
    return Limits(contract.reasoning_budget, contract.hedge_limit, contract.repeat_limit, contract.limit_answers)


def limits_from_body(body: Mapping[str, Any], defaults: Limits) -> Limits:
    """Return the request's limits: the fields it names, else the server's defaults; a bad field is a 400."""

    def count(name: str, default: int) -> int:
        value = body.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad_request(f"{name} must be an integer, 0 or more (0 means no limit).", param=name)
        return value

    limit_answers = body.get("limit_answers")
    if limit_answers is None:
        limit_answers = defaults.limit_answers
    elif not isinstance(limit_answers, bool):
        raise bad_request("limit_answers must be true or false.", param="limit_answers")
    return Limits(
        reasoning_budget=count("reasoning_budget", defaults.reasoning_budget),
        hedge_limit=count("hedge_limit", defaults.hedge_limit),
        repeat_limit=count("repeat_limit", defaults.repeat_limit),
        limit_answers=limit_answers,
    )


def answer_reserve(max_tokens: int, least: int = 0) -> int:
    """Tokens kept for the answer of a thinking model: a quarter of the reply, or ``least`` if more."""
    return min(max_tokens - 1, max(max_tokens // 4, least)) if max_tokens > 1 else 0


def count_hedges(text: str) -> int:
    """Return how many times ``text`` second-guesses itself."""
    return len(HEDGE.findall(text))


def loop_length(tokens: Sequence[int], copies: int, piece: Callable[[int], str]) -> int:
    """Return the length of the run of tokens that ``tokens`` ends with ``copies`` times in a row, or 0.

    A run must decode to at least ``MIN_LOOP_CHARS`` visible characters; the shortest run that qualifies is
    returned (a run of 3 repeated 4 times is also a run of 6 repeated twice).
    """
    if copies < 2:
        return 0
    n = len(tokens)
    for period in range(1, min(MAX_LOOP_TOKENS, n // copies) + 1):
        if tokens[n - 1] != tokens[n - 1 - period]:
            continue  # the cheap test that rejects almost every period
        span = period * copies
        tail = list(tokens[n - span :])
        block = tail[:period]
        if tail != block * copies:
            continue
        text = "".join(piece(t) for t in block)
        if len("".join(text.split())) >= MIN_LOOP_CHARS:
            return period
    return 0
