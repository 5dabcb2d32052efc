"""mlx_lm's prompt cache, with every entry holding exactly the positions its key names.

mlx_lm's LRU trims a reused entry by "key length minus the common prefix", which assumes the cached KV has
one position per key token. Speculative decoding breaks that: when a reply ends inside a verified draft,
the served model's cache already holds the positions after the last token the reply kept (and the draft
model's cache may hold fewer). Reused by the next turn, such an entry is misaligned by those positions and
the reply changes (upstream mlx_lm 0.32.2 with ``--draft-model`` gives another greedy text from the second
turn on). Here each entry is cut, before it is stored, to the positions every layer holds and the key
names, so a reused entry is always aligned.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache

from mlx_agent.disk import DiskSpace, cache_limit, disk_space, is_full, room_for
from mlx_agent.errors import MlxAgentError
from mlx_agent.files import check_private_dir, open_private, private_dir, utc_now, write_json_atomic
from mlx_agent.runtime.serving.cache_entry_check import (
    ENTRY_FORMAT,
    EntryLabel,
    EntryRejected,
    ExpectedLayout,
    binding,
    check_label,
    check_layout,
    entry_name,
    read_header,
)
from mlx_agent.wire import PROMPT_CACHE_QUARANTINE, PROMPT_CACHE_REPORT

log = logging.getLogger(__name__)


def align(tokens: list[int], prompt_cache: list[Any]) -> list[int]:
    """Trim every layer of ``prompt_cache`` to the positions all of them and ``tokens`` have; return the key."""
    offsets = [layer.offset for layer in prompt_cache if isinstance(getattr(layer, "offset", None), int)]
    if not offsets or not can_trim_prompt_cache(prompt_cache):
        return tokens
    keep = min(len(tokens), *offsets)
    for layer in prompt_cache:
        extra = layer.offset - keep
        if extra > 0:
            layer.trim(extra)
    return tokens[:keep]


class AlignedPromptCache(LRUPromptCache):
    """An ``LRUPromptCache`` whose entries are aligned with their keys when stored, and which remembers its keys.

    ``stored`` lists the keys inserted (newest last, with their cache type), so the entries still held can be
    saved when the worker ends: what mlx_lm evicted meanwhile is simply not found then.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stored: dict[tuple[Any, tuple[int, ...]], str] = {}

    def insert_cache(self, model: Any, tokens: list[int], prompt_cache: list[Any], **kwargs: Any) -> None:
        """Store ``prompt_cache`` under ``tokens``, both first cut to the positions every layer holds."""
        key = align(list(tokens), prompt_cache)
        # Evaluated here, on the generation thread whose stream computed them: the worker saves its entries
        # from its main thread after that thread (and its stream) is gone.
        mx.eval([layer.state for layer in prompt_cache])
        super().insert_cache(model, key, prompt_cache, **kwargs)
        self.stored.pop((model, tuple(key)), None)
        self.stored[(model, tuple(key))] = kwargs.get("cache_type", "assistant")
        while len(self.stored) > 2 * self.max_size:  # the LRU holds at most max_size: older keys are gone
            del self.stored[next(iter(self.stored))]

    def held_keys(self, model: Any) -> list[tuple[list[int], str]]:
        """Return the keys inserted for ``model`` (oldest first) with their cache types."""
        return [(list(tokens), kind) for (owner, tokens), kind in self.stored.items() if owner == model]


# -- kept across unloads ---------------------------------------------------------------------------------------
# A worker that is unloaded or stopped saves its entries (mlx_lm's save_prompt_cache format) into a private
# directory named by the model's reviewed identity; the next worker of that identity restores them before it
# serves, so the first turn after an unload does not prefill the whole conversation again. Each entry is checked
# before it is used (``cache_entry_check``); one that fails is moved to the private quarantine folder beside
# the entries, logged and counted, and the worker starts without it. A directory that is not private (a link,
# another user's, writable by others) is neither read nor written: the worker starts without the kept cache.

SUFFIX = ".safetensors"


def _saved(paths: Iterable[Path]) -> list[Path]:
    """Return the saved entries among ``paths`` (not a save still being written, whose name starts with a dot)."""
    return [p for p in paths if not p.name.startswith(".")]


def _mtime(path: Path) -> int:
    try:
        return os.lstat(path).st_mtime_ns
    except OSError:
        return 0


@dataclass
class Restored:
    """What a restore did: entries restored, those quarantined (name and reason), or why none were read."""

    restored: int = 0
    quarantined: list[tuple[str, str]] = field(default_factory=list)
    refused: str | None = None  # the kept cache's directory is not private: nothing was read


def unsafe_reason(directory: Path) -> str | None:
    """Return why ``directory`` (or the prompt-cache root above it) may not hold a kept cache, or None."""
    for path in (directory.parent, directory):
        try:
            check_private_dir(path)
        except MlxAgentError as exc:
            return exc.message
    return None


@dataclass
class Saved:
    """What a save did: entries written, those left out at the free-space floor, and writes that failed."""

    saved: int = 0
    skipped: int = 0  # each would have left less than the floor free: not written
    failed: int = 0  # a write that failed (a disk filled by someone else meanwhile); its partial file removed
    stopped: str | None = None  # why the save ended before its last entry (a full disk), else None


def entry_bytes(cache: list[Any], tokens: list[int]) -> int:
    """Return about what the entry's file will take: its arrays, and a header naming its tokens."""
    from mlx.utils import tree_flatten

    size = 16 * len(tokens) + 64 * 1024
    for layer in cache:
        leaves: Any = tree_flatten(layer.state)
        size += sum(int(v.nbytes) for _, v in leaves if isinstance(v, mx.array))
    return size


def save_entries(
    store: AlignedPromptCache, model_key: Any, keys: list[tuple[list[int], str]], directory: Path, identity: str
) -> Saved:
    """Write the entries of ``keys`` (newest last) still in ``store`` into ``directory``, newest first.

    An entry that would leave less than the disk's floor free is skipped (``disk.room_for``). Each is written
    to a dot-named partial file, checked, synced and renamed, so no partial entry is ever left under its name;
    a write that fails (a full disk) removes its partial file and ends the save with one log line.
    """
    result = Saved()
    if (why := unsafe_reason(directory)) is not None:
        log.warning("mlx-agent: not saving the prompt cache: %s", why)
        return result
    try:
        private_dir(directory)
    except OSError as exc:  # a full disk cannot even hold the directory
        result.failed, result.stopped = len(keys), f"cannot create {directory}: {exc.strerror or exc}"
        log.warning("mlx-agent: not saving the prompt cache: %s", result.stopped)
        return result
    stamp = time.time_ns()
    low: DiskSpace | None = None
    for order, (tokens, cache_type) in enumerate(reversed(keys)):  # the newest first: the likeliest reused
        cache, rest = store.fetch_nearest_cache(model_key, tokens)
        if cache is None or rest:
            continue  # evicted meanwhile: only exact entries are kept
        space = disk_space(directory)
        if space is not None and not room_for(space.free_bytes, space.floor_bytes, entry_bytes(cache, tokens)):
            result.skipped += 1
            low = space
            continue
        try:
            _write_entry(directory, tokens, cache_type, cache, identity, stamp - order)
        except (OSError, RuntimeError, EntryRejected) as exc:  # mlx's own write errors are RuntimeErrors
            result.failed += 1
            space = disk_space(directory)
            if is_full(exc) or (space is not None and space.low):
                result.stopped = f"the disk is full: {space.describe() if space else exc}"
                break
            log.warning("mlx-agent: a prompt cache entry was not saved: %s", str(exc)[:200])
        else:
            result.saved += 1
    _sync_dir(directory)
    if low is not None:
        log.warning("mlx-agent: %d prompt cache entries not saved: %s", result.skipped, low.describe())
    if result.stopped is not None:
        log.warning("mlx-agent: the prompt cache save stopped (%s); no partial file is left", result.stopped)
    return result


def _write_entry(
    directory: Path, tokens: list[int], cache_type: str, cache: list[Any], identity: str, mtime_ns: int
) -> None:
    """Write one entry whole under its name, or leave nothing: partial file, header check, fsync, rename."""
    from mlx_lm.models.cache import save_prompt_cache

    path = directory / entry_name(tokens)
    partial = path.with_name(f".partial-{os.getpid()}-{path.name}")  # mlx keeps the .safetensors suffix
    metadata = {
        "identity": identity,
        "tokens": json.dumps(tokens),
        "cache_type": cache_type,
        "format": ENTRY_FORMAT,
        "binding": binding(identity, tokens, cache_type),
    }
    previous = os.umask(0o077)
    try:
        save_prompt_cache(str(partial), cache, metadata)
        fd = os.open(partial, os.O_RDONLY)
        try:
            read_header(fd)  # the whole file is there: every tensor's bytes tile the data written
            os.fsync(fd)
        finally:
            os.close(fd)
        os.utime(partial, ns=(mtime_ns, mtime_ns))  # the newest entry is the most recently used (the limit)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    finally:
        os.umask(previous)


def _sync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def kept_bytes(root: Path) -> int:
    """Return what the saved entries under the prompt-cache ``root`` take (quarantined ones included)."""
    total = 0
    for path in [*root.glob(f"*/{PROMPT_CACHE_QUARANTINE}/*{SUFFIX}"), *_saved(root.glob(f"*/*{SUFFIX}"))]:
        with contextlib.suppress(OSError):
            total += os.lstat(path).st_size
    return total


def fit_to_disk(root: Path, configured_bytes: int) -> tuple[int, int]:
    """Hold the saved entries under ``root`` to the effective limit (``disk.cache_limit``); return it, and what is left.

    Called when a worker starts (before it restores) and after it saves, so the cache shrinks with its disk.
    """
    space = disk_space(root)
    limit = configured_bytes if space is None else cache_limit(configured_bytes, space.free_bytes, kept_bytes(root))
    return limit, enforce_limit(root, limit)


def keep_entries(store: AlignedPromptCache, model_key: Any, directory: Path, configured_bytes: int) -> Saved:
    """Save the entries still held, hold the home's entries to the effective limit, and report it beside them."""
    result = save_entries(store, model_key, store.held_keys(model_key), directory, directory.name)
    limit, total = fit_to_disk(directory.parent, configured_bytes)
    write_report(directory, result, limit, total)
    return result


def write_report(directory: Path, result: Saved, limit: int, total: int) -> None:
    """Write what the save did, with running totals of skipped and failed entries, for ``serve status``."""
    path = directory / PROMPT_CACHE_REPORT
    try:
        before = json.loads(path.read_text(encoding="utf-8"))  # the running totals so far
    except (OSError, ValueError):
        before = {}
    before = before if isinstance(before, dict) else {}
    space = disk_space(directory)
    report = {
        "at": utc_now(),
        "saved": result.saved,
        "skipped": result.skipped,
        "failed": result.failed,
        "stopped": result.stopped,
        "skipped_total": _total(before, "skipped_total") + result.skipped,
        "failed_total": _total(before, "failed_total") + result.failed,
        "limit_bytes": limit,
        "kept_bytes": total,
        "free_bytes": None if space is None else space.free_bytes,
        "floor_bytes": None if space is None else space.floor_bytes,
    }
    if not os.path.isdir(directory):
        return
    try:
        write_json_atomic(path, report)
    except (OSError, MlxAgentError) as exc:  # the disk is full: the log line says it, status reads the old one
        log.warning("mlx-agent: the prompt cache's save report was not written: %s", getattr(exc, "message", exc))


def _total(report: dict[str, Any], key: str) -> int:
    value = report.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def restore_entries(
    store: AlignedPromptCache, model_key: Any, directory: Path, identity: str, expected: ExpectedLayout
) -> Restored:
    """Insert the saved entries of ``directory`` that pass every check into ``store``, oldest first.

    ``expected`` is this model's cache layout; an entry failing a check is quarantined, never loaded into use.
    """
    result = Restored()
    if not os.path.lexists(directory):
        return result  # nothing kept yet
    if (why := unsafe_reason(directory)) is not None:
        log.warning("mlx-agent: starting without the kept prompt cache: %s", why)
        result.refused = why
        return result
    if not directory.is_dir():
        return result
    for partial in directory.glob(".partial-*"):  # a save its worker did not finish (killed): never complete
        with contextlib.suppress(OSError):
            partial.unlink()
    for path in sorted(_saved(directory.glob(f"*{SUFFIX}")), key=_mtime):
        try:
            cache, label = _checked_entry(path, identity, expected)
        except EntryRejected as exc:
            _quarantine(path, exc.reason)
            result.quarantined.append((path.name, exc.reason))
            continue
        store.insert_cache(model_key, label.tokens, cache, cache_type=label.cache_type)
        os.utime(path)  # restored: the most recently used, for the disk limit
        result.restored += 1
    return result


def _checked_entry(path: Path, identity: str, expected: ExpectedLayout) -> tuple[list[Any], EntryLabel]:
    """Return the entry at ``path``, loaded, and its label, once its file, header and layout pass."""
    from mlx_lm.models.cache import load_prompt_cache

    try:
        fd = open_private(path, os.O_RDONLY | os.O_NONBLOCK)  # never a link, a FIFO's wait or another's file
    except MlxAgentError as exc:
        raise EntryRejected(exc.message) from None
    except OSError as exc:
        raise EntryRejected(f"cannot be opened: {exc.strerror or exc}") from None
    try:
        header = read_header(fd)
    except OSError as exc:
        raise EntryRejected(f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    label = check_label(header, path.name, identity, expected.classes, expected.quantized is not None)
    try:
        cache = load_prompt_cache(str(path))  # type: ignore[no-untyped-call]
    except Exception as exc:  # the header passed: what mlx or mlx_lm still refuses is this entry's damage
        raise EntryRejected(f"mlx could not load it: {str(exc)[:200]}") from None
    check_layout(cache, label, expected)
    return cache, label


def _quarantine(path: Path, reason: str) -> None:
    """Move a refused entry into the private quarantine folder beside it (else delete it), with one log line."""
    where = path.parent / PROMPT_CACHE_QUARANTINE
    try:
        private_dir(where)
        os.replace(path, where / path.name)
    except (OSError, MlxAgentError) as exc:
        with contextlib.suppress(OSError):
            path.unlink()
        log.warning("mlx-agent: deleted the saved prompt cache %s (%s; quarantine failed: %s)", path.name, reason, exc)
        return
    log.warning("mlx-agent: quarantined the saved prompt cache %s: %s", path.name, reason)


def probe_layout(models: list[Any], quantized: tuple[int, int] | None) -> ExpectedLayout:
    """Return the layout of ``models``' prompt cache (mlx_lm's order: the model's layers, then the draft's)."""

    def probe() -> list[Any]:
        from mlx_lm.models.cache import make_prompt_cache

        layers: list[Any] = []
        for model in models:
            cache = make_prompt_cache(model)
            model(mx.array([[0]]), cache=cache)
            layers += cache
        mx.eval([layer.state for layer in layers])
        return layers

    return ExpectedLayout(probe, quantized)


def enforce_limit(root: Path, limit_bytes: int) -> int:
    """Delete saved entries under ``root`` until they fit ``limit_bytes``; return the bytes left.

    Quarantined entries go first (never used again), then the least recently used.
    """
    if not root.is_dir():
        return 0
    quarantined = sorted(root.glob(f"*/{PROMPT_CACHE_QUARANTINE}/*{SUFFIX}"), key=_mtime)
    files = quarantined + sorted(_saved(root.glob(f"*/*{SUFFIX}")), key=_mtime)
    sizes = {p: os.lstat(p).st_size for p in files}
    total = sum(sizes.values())
    for path in files:
        if total <= limit_bytes:
            break
        path.unlink(missing_ok=True)
        total -= sizes[path]
    return total
