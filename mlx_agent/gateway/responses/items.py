"""The input items of a stored response, and the pages ``GET /v1/responses/{id}/input_items`` answers (pure).

* ``items_of``: the request's ``input`` as the API lists it. A string is one ``user`` message with one
  ``input_text`` part; a message's string content becomes one part (``output_text`` in an assistant's
  message, ``input_text`` otherwise); an item with a ``role`` and no ``type`` is a ``message``. Each item keeps
  the ``id`` it was sent with, or gets one by its type (``ITEM_PREFIXES``); messages, calls and their outputs
  without a ``status`` are ``completed``. Everything else is kept as sent. Only this request's input is
  listed: the items of a ``previous_response_id`` are listed under that response.
* ``ItemsQuery.parse``: the query, a closed whitelist as the Responses body is: ``limit`` (1 to 100, default
  20), ``order`` (``asc`` or ``desc``, default ``desc``: the last item sent first), ``after`` (an item id of
  this response: the page starts after it, in this order), ``include`` (OpenAI's includable values, also as
  ``include[]``, which the official SDK sends). A refusal is a ``RequestRefused`` naming the parameter.
* ``page``: the list object, ``{"object": "list", "data", "first_id", "last_id", "has_more"}``. A reasoning
  item's ``encrypted_content`` is listed only when ``include`` asks for ``reasoning.encrypted_content``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from multidict import MultiMapping

from mlx_agent.api_errors import Code
from mlx_agent.gateway.door.http_errors import refused
from mlx_agent.gateway.responses.output import IdMaker, new_id, output_text

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
ORDERS = ("asc", "desc")
QUERY = ("limit", "order", "after", "include", "include[]")
# OpenAI's ResponseIncludable values: accepted; only reasoning.encrypted_content changes what is listed here (no
# images, search results or logprobs are kept).
INCLUDABLE = frozenset(
    {
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
    }
)
ENCRYPTED_REASONING = "reasoning.encrypted_content"
ITEM_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "custom_tool_call": "ctc",
    "function_call_output": "fco",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
    "compaction": "cmp",
    "compaction_summary": "cmp",
}
WITH_STATUS = ("message", "function_call", "custom_tool_call", "function_call_output", "custom_tool_call_output")


def items_of(items: str | list[Any] | None, make_id: IdMaker = new_id) -> list[dict[str, Any]]:
    """Return a request's ``input`` (already accepted by the translator) as listed input items, each with an id."""
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    return [_item(item, make_id) for item in items or [] if isinstance(item, Mapping)]


def _item(sent: Mapping[str, Any], make_id: IdMaker) -> dict[str, Any]:
    kind = sent.get("type") or ("message" if "role" in sent else None)
    given = sent.get("id")
    item: dict[str, Any] = {
        "id": given if isinstance(given, str) and given else make_id(ITEM_PREFIXES.get(str(kind), "item")),
        **{k: copy.deepcopy(v) for k, v in sent.items() if k != "id"},
        "type": kind,
    }
    if kind in WITH_STATUS and item.get("status") is None:
        item["status"] = "completed"
    content = item.get("content")
    if kind == "message" and (content is None or isinstance(content, str)):
        text = content or ""
        part = output_text(text) if item.get("role") == "assistant" else {"type": "input_text", "text": text}
        item["content"] = [part]
    return item


@dataclass(frozen=True)
class ItemsQuery:
    """The query of one input items page."""

    limit: int = DEFAULT_LIMIT
    order: str = "desc"
    after: str | None = None
    include: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, query: MultiMapping[str]) -> ItemsQuery:
        """Return the page the query asks for; raise ``RequestRefused`` (400) naming the bad parameter."""
        for name in query:
            if name not in QUERY:
                raise refused(
                    Code.UNSUPPORTED_PARAMETER,
                    f"'{name}' is not supported here (the query takes limit, order, after and include)",
                    param=name,
                )
        include = [*query.getall("include", []), *query.getall("include[]", [])]
        unknown = sorted(set(include) - INCLUDABLE)
        if unknown:
            raise refused(
                Code.INVALID_VALUE,
                f"'include': {unknown[0]!r} is not one of {', '.join(sorted(INCLUDABLE))}",
                param="include",
            )
        order = _one(query, "order") or "desc"
        if order not in ORDERS:
            raise refused(Code.INVALID_VALUE, "'order': must be 'asc' or 'desc'", param="order")
        after = _one(query, "after")
        if after == "":
            raise refused(Code.INVALID_VALUE, "'after': must be an item id", param="after")
        return cls(_limit(_one(query, "limit")), order, after, frozenset(include))


def _one(query: MultiMapping[str], name: str) -> str | None:
    """Return a parameter given at most once (None when absent)."""
    values = query.getall(name, [])
    if len(values) > 1:
        raise refused(Code.INVALID_VALUE, f"'{name}' is given more than once", param=name)
    return values[0] if values else None


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        limit = int(raw.strip(), 10)
    except ValueError:
        raise refused(Code.INVALID_TYPE, f"'limit': must be an integer, not {raw!r}", param="limit") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise refused(Code.INVALID_VALUE, f"'limit': must be between 1 and {MAX_LIMIT}", param="limit")
    return limit


def page(items: list[dict[str, Any]], query: ItemsQuery) -> dict[str, Any]:
    """Return the list object of the page ``query`` asks for; raise ``RequestRefused`` for an unknown ``after``."""
    ordered = items if query.order == "asc" else items[::-1]
    start = 0
    if query.after is not None:
        start = _index(ordered, query.after) + 1
    data = [_listed(item, query.include) for item in ordered[start : start + query.limit]]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + query.limit < len(ordered),
    }


def _index(items: list[dict[str, Any]], item_id: str) -> int:
    for index, item in enumerate(items):
        if item.get("id") == item_id:
            return index
    raise refused(Code.INVALID_VALUE, f"'after': no input item of this response has the id '{item_id}'", param="after")


def _listed(item: dict[str, Any], include: frozenset[str]) -> dict[str, Any]:
    if item.get("type") == "reasoning" and ENCRYPTED_REASONING not in include:
        return {k: v for k, v in item.items() if k != "encrypted_content"}
    return item
