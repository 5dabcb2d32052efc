"""Stored Responses: the most recent ``CAPACITY`` Response objects, in gateway memory, until it stops.

A response is stored when its request did not say ``store: false``. Each is kept with the API key that created
it (its non-secret id, or None without API keys), the chat conversation it ends (for ``previous_response_id``)
and its request's input items (for ``GET .../input_items``); another key can neither read nor delete it, and
is answered as for an id never stored. Memory is bounded by the capacity: each entry holds one request's input
(at most the front's body limit) and its conversation. Nothing is written to disk.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

CAPACITY = 64


@dataclass(frozen=True)
class Stored:
    """One stored response: who made it, the Response object, its conversation and its input items."""

    owner: str | None
    response: dict[str, Any]
    conversation: list[dict[str, Any]]
    items: list[dict[str, Any]]


class ResponseStore:
    """The most recent responses by id; the oldest is dropped when a new one would pass the capacity."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, Stored] = OrderedDict()

    def put(
        self,
        response: dict[str, Any],
        owner: str | None,
        conversation: list[dict[str, Any]] | None = None,
        items: list[dict[str, Any]] | None = None,
    ) -> None:
        """Keep ``response`` (a copy), its chat conversation and its input items, owned by the key id ``owner``."""
        kept = Stored(owner, copy.deepcopy(response), copy.deepcopy(conversation or []), copy.deepcopy(items or []))
        self._items[response["id"]] = kept
        self._items.move_to_end(response["id"])
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def _owned(self, response_id: str, owner: str | None) -> Stored | None:
        found = self._items.get(response_id)
        return found if found is not None and found.owner == owner else None

    def get(self, response_id: str, owner: str | None) -> dict[str, Any] | None:
        """Return the stored response with this id if ``owner`` created it, else None."""
        found = self._owned(response_id, owner)
        return None if found is None else copy.deepcopy(found.response)

    def conversation(self, response_id: str, owner: str | None) -> list[dict[str, Any]] | None:
        """Return the chat messages up to and including the stored response's answer, if ``owner`` made it."""
        found = self._owned(response_id, owner)
        return None if found is None else copy.deepcopy(found.conversation)

    def input_items(self, response_id: str, owner: str | None) -> list[dict[str, Any]] | None:
        """Return the input items of the stored response's request, in the order sent, if ``owner`` made it."""
        found = self._owned(response_id, owner)
        return None if found is None else copy.deepcopy(found.items)

    def delete(self, response_id: str, owner: str | None) -> bool:
        """Drop the stored response if ``owner`` made it; say whether one was dropped."""
        if self._owned(response_id, owner) is None:
            return False
        del self._items[response_id]
        return True

    def __len__(self) -> int:
        return len(self._items)
