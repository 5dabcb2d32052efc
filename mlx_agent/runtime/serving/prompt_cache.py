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

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache

from mlx_agent.files import check_private_dir, private_dir

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
# serves, so the first turn after an unload does not prefill the whole conversation again.

SUFFIX = ".safetensors"


def _saved(paths: Iterable[Path]) -> list[Path]:
    """Return the saved entries among ``paths`` (not a save still being written, whose name starts with a dot)."""
    return [p for p in paths if not p.name.startswith(".")]


def _entry_name(tokens: list[int]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:32] + SUFFIX


def save_entries(
    store: AlignedPromptCache, model_key: Any, keys: list[tuple[list[int], str]], directory: Path, identity: str
) -> int:
    """Write the entries of ``keys`` (newest last) still in ``store`` into ``directory``; return how many."""
    from mlx_lm.models.cache import save_prompt_cache

    private_dir(directory)
    saved = 0
    for tokens, cache_type in keys:
        cache, rest = store.fetch_nearest_cache(model_key, tokens)
        if cache is None or rest:
            continue  # evicted meanwhile: only exact entries are kept
        path = directory / _entry_name(tokens)
        partial = path.with_name(f".partial-{os.getpid()}-{path.name}")  # mlx keeps the .safetensors suffix
        metadata = {"identity": identity, "tokens": json.dumps(tokens), "cache_type": cache_type}
        previous = os.umask(0o077)
        try:
            save_prompt_cache(str(partial), cache, metadata)
        finally:
            os.umask(previous)
        os.replace(partial, path)
        saved += 1
    return saved


def restore_entries(store: AlignedPromptCache, model_key: Any, directory: Path, identity: str) -> int:
    """Insert the saved entries of ``directory`` made for ``identity`` into ``store``, oldest first."""
    from mlx_lm.models.cache import load_prompt_cache

    if not directory.is_dir():
        return 0
    check_private_dir(directory)
    for partial in directory.glob(".partial-*"):  # a save its worker did not finish (killed): never complete
        partial.unlink(missing_ok=True)
    restored = 0
    for path in sorted(_saved(directory.glob(f"*{SUFFIX}")), key=lambda p: p.stat().st_mtime_ns):
        try:
            cache, metadata = load_prompt_cache(str(path), return_metadata=True)  # type: ignore[no-untyped-call]
            if metadata.get("identity") != identity:
                continue  # made for another model, adapter or template: never served from
            tokens = json.loads(metadata["tokens"])
        except (OSError, ValueError, KeyError) as exc:
            log.warning("mlx-agent: skipping the saved prompt cache %s (%s)", path.name, exc)
            continue
        store.insert_cache(model_key, tokens, cache, cache_type=metadata.get("cache_type", "assistant"))
        os.utime(path)  # restored: the most recently used, for the disk limit
        restored += 1
    return restored


def enforce_limit(root: Path, limit_bytes: int) -> int:
    """Delete the least recently used saved entries under ``root`` until they fit ``limit_bytes``; return bytes."""
    files = sorted(_saved(root.glob(f"*/*{SUFFIX}")), key=lambda p: p.stat().st_mtime_ns) if root.is_dir() else []
    sizes = {p: p.stat().st_size for p in files}
    total = sum(sizes.values())
    for path in files:
        if total <= limit_bytes:
            break
        path.unlink(missing_ok=True)
        total -= sizes[path]
    return total
