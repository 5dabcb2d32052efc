"""Telling a client that its own reply limit was lowered, so a cut reply is not taken for the limit it asked.

A request's ``max_tokens`` (``max_output_tokens``) is lowered in two places: by the front, to the plan's
``max_tokens_ceiling`` (``openai.request.reply_limit``), and by our worker, to the room the prompt leaves in
the model's context, which it reports in ``GRANTED_MAX_TOKENS_HEADER`` of its reply. The request's exchange
(``observe``) keeps both; when the limit granted is below the client's own, the client is told:

* the response header ``x-mlx-agent-max-tokens-lowered: REQUESTED->GRANTED`` (on a stream, when the worker's
  answer began before the front had to start the stream to keep it alive: ``sse.ClientStream``);
* the request line's ``max_tokens_requested`` and ``max_tokens`` (the limit granted);
* the body, where the API has a place: a Responses object's ``max_output_tokens`` is the limit granted.
  Chat completions and Anthropic Messages have no such field; their header and request line say it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from mlx_agent.wire import GRANTED_MAX_TOKENS_HEADER

LOWERED_HEADER = "x-mlx-agent-max-tokens-lowered"


class ReplyLimits(Protocol):
    """What a notice reads of a request's exchange (``request_log.Exchange``): the limit asked and the one granted."""

    max_tokens_requested: int | None
    max_tokens: int | None

    @property
    def limit_lowered(self) -> bool:
        """Whether the reply limit granted is below the client's own."""


def worker_granted(exchange: ReplyLimits | None, headers: Mapping[str, str]) -> None:
    """Record the limit our worker applied, when the context's room cut what the front sent."""
    raw = headers.get(GRANTED_MAX_TOKENS_HEADER)
    if exchange is None or raw is None:
        return
    try:
        granted = int(raw)
    except ValueError:
        return
    if granted > 0 and (exchange.max_tokens is None or granted < exchange.max_tokens):
        exchange.max_tokens = granted


def lowered_headers(exchange: ReplyLimits | None) -> dict[str, str]:
    """Return the header that says the request's own limit was lowered (empty when it was not)."""
    if exchange is None or not exchange.limit_lowered:
        return {}
    return {LOWERED_HEADER: f"{exchange.max_tokens_requested}->{exchange.max_tokens}"}


def with_granted_output(response: dict[str, Any], exchange: ReplyLimits | None) -> dict[str, Any]:
    """Return a Responses object whose ``max_output_tokens`` is the limit granted, when it was lowered."""
    if exchange is not None and exchange.limit_lowered:
        response["max_output_tokens"] = exchange.max_tokens
    return response
