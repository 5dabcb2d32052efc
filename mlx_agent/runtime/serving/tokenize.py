"""``POST /v1/tokenize`` in the worker: a text or a conversation as this model's tokenizer reads it.

A ``text`` is encoded as a text completion's prompt is (``tokenizer.encode``, special tokens included). ``messages``
are adapted to the template and rendered with the generation prompt as a chat's are (``request_options.prepare_body``
and ``Conversations.render``, with the plan's template arguments), then encoded without adding special tokens again,
which is how the template's own tokens are counted once. The body is checked by its declaration
(``bodies.TokenizeBody``) here as at the front. Pure but for the tokenizer: no generation, no prompt cache.
"""

from __future__ import annotations

from typing import Any, TypedDict

from mlx_agent.api_errors import Code
from mlx_agent.bodies import TokenizeBody, check
from mlx_agent.errors import BodyInvalid
from mlx_agent.runtime.serving.errors_http import api_error, bad_request, model_not_found
from mlx_agent.runtime.serving.request_options import Served, prepare_body


class Tokens(TypedDict):
    """The worker's answer: the token ids and how many there are."""

    object: str
    tokens: list[int]
    count: int


def tokenize(body: dict[str, Any], served: Served, tokenizer: Any) -> Tokens:
    """Return the tokens of a checked tokenize body; raise ``HttpError`` for a bad one."""
    try:
        parsed = check(TokenizeBody, body)
    except BodyInvalid as error:
        raise bad_request(error.message, param=error.param, code=error.code) from None
    if parsed.messages is None:
        model = parsed.model or "default_model"
        if model not in served.model_names:
            raise model_not_found(model)
        tokens = tokenizer.encode(parsed.text)
    else:
        if served.conversations is None:
            raise api_error(
                Code.TEMPLATE_ERROR,
                "This model has no chat template to render messages with; send its prompt as 'text'.",
                param="messages",
            )
        chat, _ = prepare_body({"model": parsed.model, "messages": parsed.messages}, served, chat=True)
        text = served.conversations.render(chat["messages"], None, True)
        tokens = tokenizer.encode(text, add_special_tokens=False)
    ids = [int(token) for token in tokens]
    return {"object": "tokens", "tokens": ids, "count": len(ids)}
