"""Stored Responses: the most recent ``CAPACITY`` Response objects, in gateway memory, until it stops.

A response is stored when its request did not say ``store: false``. Each is kept with the API key that created
it (its non-secret id, or None without API keys); another key cannot read it. Nothing is written to disk.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

CAPACITY = 64


class ResponseStore:
    """The most recent responses by id; the oldest is dropped when a new one would pass the capacity."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[str | None, dict[str, Any], list[dict[str, Any]]]] = OrderedDict()

    def put(
        self, response: dict[str, Any], owner: str | None, conversation: list[dict[str, Any]] | None = None
    ) -> None:
        """Keep ``response`` (a copy) and the chat conversation it ends, owned by the key id ``owner``."""
        self._items[response["id"]] = (owner, copy.deepcopy(response), copy.deepcopy(conversation or []))
        self._items.move_to_end(response["id"])
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def get(self, response_id: str, owner: str | None) -> dict[str, Any] | None:
        """Return the stored response with this id if ``owner`` created it, else None."""
        found = self._items.get(response_id)
        if found is None or found[0] != owner:
            return None
        return copy.deepcopy(found[1])

    def conversation(self, response_id: str, owner: str | None) -> list[dict[str, Any]] | None:
        """Return the chat messages up to and including the stored response's answer, if ``owner`` made it."""
        found = self._items.get(response_id)
        if found is None or found[0] != owner:
            return None
        return copy.deepcopy(found[2])

    def __len__(self) -> int:
        return len(self._items)
