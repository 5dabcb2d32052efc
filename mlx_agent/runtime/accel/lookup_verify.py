"""The reply watcher under prompt lookup: the masks of a draft's positions, and taking back what was rejected.

mlx_lm calls the watcher once per token, with the history so far. The lookup decoder verifies a draft of k
tokens in one forward pass, so it needs the watcher's answer for k + 1 positions before it knows which of them
it keeps. ``WatchedChoices.draft`` asks the watcher for each position in turn as if the whole draft were
accepted, marking its state after each; a draft token the watcher rules out ends the draft there (the model's
steered choice can never be it). Once the model's choices are known, ``accept`` restores the mark of the last
position kept, so the watcher has seen exactly the calls native generation would have made: every emitted
token is the argmax of the logits as the watcher steered them at its position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mlx_agent.runtime.reply.watcher import Mark, ReplyWatcher


class WatchedChoices:
    """What steers the lookup decoder's greedy choices for one reply: its watcher (module docstring)."""

    def __init__(self, watcher: ReplyWatcher, width: int) -> None:
        self.watcher = watcher
        self.width = width
        self._marks: list[Mark] = []

    def draft(self, sequence: Sequence[int], draft: list[int]) -> tuple[list[int], NDArray[np.bool_] | None]:
        """Return the draft, cut where the watcher rules a token out, and each position's mask (None: free).

        The watcher is left as if the returned draft had been accepted; ``accept`` takes the rest back.
        """
        size = len(sequence)

        def read(lo: int, hi: int) -> list[int]:
            if hi <= size:
                return list(sequence[lo:hi])
            return [*sequence[lo:], *draft[max(0, lo - size) : hi - size]]

        self.watcher.hold()
        self._marks = []
        rows: list[NDArray[np.bool_] | None] = []
        for position in range(len(draft) + 1):
            row = self.watcher.allowed(size + position, read, self.width)
            self._marks.append(self.watcher.mark())
            rows.append(row)
            if position < len(draft) and row is not None and not _allows(row, draft[position]):
                draft = draft[:position]
                break
        if all(row is None for row in rows):
            return draft, None
        free = np.ones(self.width, dtype=bool)
        return draft, np.stack([free if row is None else row for row in rows])

    def accept(self, count: int) -> None:
        """Keep the watcher as it was at the draft's position ``count`` (the model's own token follows)."""
        self.watcher.restore(self._marks[count])
        self.watcher.release()
        self._marks = []

    def step(self, sequence: Sequence[int], pending: Any) -> NDArray[np.bool_] | None:
        """Return the mask after ``sequence`` and the lazily computed token ``pending`` (None: after ``sequence``).

        ``pending`` is read only if the watcher reads the newest token, as mlx_lm's pipelined steps are.
        """
        size = len(sequence)

        def read(lo: int, hi: int) -> list[int]:
            known = list(sequence[lo:hi])
            if hi > size:
                known.append(int(pending.item()))
            return known

        return self.watcher.allowed(size + (pending is not None), read, self.width)


def _allows(row: NDArray[np.bool_], token: int) -> bool:
    return 0 <= token < len(row) and bool(row[token])
