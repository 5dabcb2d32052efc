"""What a worker tells its front while it loads and prefills: a small JSON file the front reads when asked.

The front names the file in the worker's environment (``wire.PROGRESS_ENV``), beside the worker's socket in
its 0700 directory; a worker started without it reports nothing. The worker replaces the file whole (a
temporary file and a rename; no fsync: it dies with the worker) with::

    {"pid", "updated_at", "load": {"loaded_bytes", "total_bytes", "started_at", "done"} | null,
     "prefill": [{"processed", "total", "first_processed", "started_at", "updated_at"}], "prefill_tokens"}

``load`` counts the bytes of the model's parameters read from its weight files so far: the model is loaded
lazily (``lazy=True``, nothing read yet), then its parameters are evaluated in about ``LOAD_STEPS`` parts, each
part reading its tensors from the files, and the count grows after each part (a group's rank 0 counts its own
shard: ``sharded_loading``). ``prefill`` holds one entry per request still reading its prompt, from mlx_lm's own
progress reports (one per prefill step; mlx_vlm's worker copies its per-step counts, ``mlx_vlm_server``);
``prefill_tokens`` counts every prompt token processed since the worker started (the front turns it into
prefill tokens per second). Times are ``time.time()``.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from mlx_agent.wire import PROGRESS_ENV

LOAD_STEPS = 50  # parts a load is evaluated in: fine enough to watch, few enough to cost nothing
MAX_PART_BYTES = 256 * 1024 * 1024  # a part of a large model still reports every few hundred MB
PREFILL_WRITE_S = 0.05  # a prefill's step reports are written at most this often (its start and end always)


class Board:
    """The worker's progress, written to its file on every change that matters (thread-safe)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.load: dict[str, Any] | None = None
        self.prefills: dict[int, dict[str, Any]] = {}
        self.prefill_tokens = 0
        self.written = 0.0

    def document(self) -> dict[str, Any]:
        """Return what the file holds."""
        return {
            "pid": os.getpid(),
            "updated_at": time.time(),
            "load": None if self.load is None else dict(self.load),
            "prefill": [dict(p) for p in self.prefills.values()],
            "prefill_tokens": self.prefill_tokens,
        }

    def _write(self, force: bool = True) -> None:
        """Replace the file (caller holds the lock); a write that fails is skipped, never the request."""
        now = time.monotonic()
        if self.path is None or (not force and now - self.written < PREFILL_WRITE_S):
            return
        self.written = now
        temp = self.path.with_name(f".{self.path.name}.{threading.get_ident()}")
        try:
            temp.write_text(json.dumps(self.document()))
            os.replace(temp, self.path)
        except OSError:
            temp.unlink(missing_ok=True)

    def load_begin(self, total_bytes: int) -> None:
        """Count ``total_bytes`` more to read (a draft model's load adds to its base model's)."""
        with self.lock:
            if self.load is None or self.load["done"]:
                self.load = {"loaded_bytes": 0, "total_bytes": 0, "started_at": time.time(), "done": False}
            self.load["total_bytes"] += total_bytes
            self._write()

    def load_advance(self, nbytes: int) -> None:
        """Count ``nbytes`` read."""
        with self.lock:
            if self.load is not None:
                self.load["loaded_bytes"] += nbytes
                self._write()

    def load_end(self) -> None:
        """Mark the load done (the worker is about to listen)."""
        with self.lock:
            if self.load is not None:
                self.load["loaded_bytes"] = self.load["total_bytes"]
                self.load["done"] = True
            self._write()

    def prefill(self, key: int, processed: int, total: int) -> None:
        """Record a request's prompt progress; the entry goes once the whole prompt is processed."""
        with self.lock:
            now = time.time()
            entry = self.prefills.get(key)
            before = 0 if entry is None else entry["processed"]
            self.prefill_tokens += max(0, processed - before)
            if processed >= total:
                self.prefills.pop(key, None)
                self._write()
                return
            if entry is None:
                self.prefills[key] = {
                    "processed": processed,
                    "total": total,
                    "first_processed": processed,  # what the first step read: the rate counts the steps after
                    "started_at": now,
                    "updated_at": now,
                }
                self._write()
                return
            entry.update(processed=processed, total=total, updated_at=now)
            self._write(force=False)

    def prefill_end(self, key: int) -> None:
        """Forget a request's prefill (its reply ended or failed before its prompt was read)."""
        with self.lock:
            if self.prefills.pop(key, None) is not None:
                self._write()

    def prefill_keep(self, keys: Collection[int]) -> None:
        """Forget the prefills of every request but ``keys`` (mlx_vlm drops a cancelled or failed one silently)."""
        with self.lock:
            gone = [key for key in self.prefills if key not in keys]
            for key in gone:
                del self.prefills[key]
            if gone:
                self._write()


_BOARD: Board | None = None


def board() -> Board:
    """Return this worker's board (its file from the environment the front gave it)."""
    global _BOARD
    if _BOARD is None:
        raw = os.environ.get(PROGRESS_ENV)
        _BOARD = Board(Path(raw) if raw else None)
    return _BOARD


def evaluate(model: Any, where: Board | None = None) -> None:
    """Evaluate a lazily loaded model's parameters part by part, counting the bytes of each part as read."""
    evaluate_tree(model.parameters(), where)


def evaluate_tree(parameters: Any, where: Board | None = None) -> None:
    """Evaluate a tree of lazy parameters part by part, counting the bytes of each part as read."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    where = where or board()
    leaves: Any = tree_flatten(parameters)  # (name, array) pairs
    arrays = [leaf[1] for leaf in leaves]
    total = sum(int(a.nbytes) for a in arrays)  # from shapes and dtypes: nothing is read for it
    where.load_begin(total)
    step = min(max(total // LOAD_STEPS, 1), MAX_PART_BYTES)
    part: list[Any] = []
    size = 0
    for array in arrays:
        part.append(array)
        size += int(array.nbytes)
        if size >= step:
            mx.eval(part)
            where.load_advance(size)
            part, size = [], 0
    if part:
        mx.eval(part)
        where.load_advance(size)


def loading(load: Callable[..., Any], finish: bool = False) -> Callable[..., Any]:
    """Wrap a runtime's ``load`` (the model first in what it returns) so that it reads its weights in parts.

    ``finish`` marks the load done when it returns (mlx_vlm's server: nothing of ours runs between its load and
    its listening); mlx_lm's wrapped ``run`` marks it itself, after a draft model's load.
    """

    @functools.wraps(load)  # its signature stays the runtime's (the seam checks read it)
    def load_reporting(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("lazy"):
            return load(*args, **kwargs)
        result = load(*args, **{**kwargs, "lazy": True})
        evaluate(result[0])
        if finish:
            board().load_end()
        return result

    return load_reporting


def sharded_loading(sharded_load: Callable[..., Any], where: Board | None = None) -> Callable[..., Any]:
    """Wrap mlx_lm's ``sharded_load`` so that its one evaluation of this rank's parameters goes in parts.

    ``sharded_load`` loads lazily, shards, then evaluates ``model.parameters()`` (a dict) in one ``mx.eval``;
    for its duration (before any generation thread exists) an ``mx.eval`` of one dict goes through
    ``evaluate_tree``, so the board counts this rank's own share of the weights. Its other evaluations (a
    collective on a scalar) pass through unchanged.
    """

    @functools.wraps(sharded_load)
    def sharded_load_reporting(*args: Any, **kwargs: Any) -> Any:
        import mlx.core as mx

        whole = mx.eval

        def in_parts(*trees: Any) -> None:
            if len(trees) == 1 and isinstance(trees[0], dict):
                evaluate_tree(trees[0], where)  # its parts are lists: they reach ``whole``
                return
            whole(*trees)

        mx.eval = in_parts
        try:
            return sharded_load(*args, **kwargs)
        finally:
            mx.eval = whole

    return sharded_load_reporting


def reporting(
    key: int, callback: Callable[[int, int], None] | None, where: Board | None = None
) -> Callable[[int, int], None]:
    """Return a prefill progress callback that records on the board, then calls ``callback``."""
    where = where or board()

    def progress(processed: int, total: int) -> None:
        where.prefill(key, int(processed), int(total))
        if callback is not None:
            callback(processed, total)

    return progress


def ending(key: int, tokens: Iterator[Any], where: Board | None = None) -> Iterator[Any]:
    """Yield ``tokens``; the request's prefill entry goes with the first of them, or however they end."""
    where = where or board()
    first = True
    try:
        for token in tokens:
            if first:
                where.prefill_end(key)  # the prompt is read once a token comes, reported to the end or not
                first = False
            yield token
    finally:
        where.prefill_end(key)
