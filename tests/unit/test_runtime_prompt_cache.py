"""The prompt cache stores entries whose cached positions match their keys (speculative decoding runs ahead)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlx_agent.runtime.serving.cache_entry_check import ExpectedLayout
from mlx_agent.runtime.serving.prompt_cache import (
    AlignedPromptCache,
    align,
    enforce_limit,
    restore_entries,
    save_entries,
)


def filled(positions: int) -> KVCache:
    """Return one KV cache layer holding ``positions`` positions."""
    layer = KVCache()  # type: ignore[no-untyped-call]
    keys = mx.zeros((1, 2, positions, 4))
    layer.update_and_fetch(keys, keys)  # type: ignore[no-untyped-call]
    return layer


LAYOUT = ExpectedLayout(lambda: [filled(1)])  # one KV layer of 2 heads of dim 4, as ``filled`` makes


def test_layers_that_ran_ahead_are_cut_back_to_the_key() -> None:
    """A served model's layers holding positions past the key are trimmed to the key's length."""
    cache = [filled(12), filled(12)]
    assert align(list(range(10)), cache) == list(range(10))
    assert [layer.offset for layer in cache] == [10, 10]


def test_a_lagging_layer_shortens_the_key_and_the_others() -> None:
    """A draft layer holding fewer positions than the key cuts the key and every other layer to it."""
    cache = [filled(12), filled(8)]
    assert align(list(range(10)), cache) == list(range(8))
    assert [layer.offset for layer in cache] == [8, 8]


def test_a_reused_entry_is_aligned_with_the_next_prompt() -> None:
    """After storing a run-ahead entry, the nearest match for a longer prompt resumes exactly after the key."""
    store = AlignedPromptCache(max_size=4)
    store.insert_cache("m", list(range(10)), [filled(13)])
    cache, rest = store.fetch_nearest_cache("m", [*range(10), 99, 98])
    assert cache is not None and cache[0].offset + len(rest) == 12


def test_saved_entries_come_back_for_the_same_identity_only(tmp_path: Path) -> None:
    """Entries saved by one worker are restored by the next of the same identity, never by another's."""
    store = AlignedPromptCache(max_size=4)
    store.insert_cache("m", list(range(10)), [filled(10)])
    store.insert_cache("m", [5, 6, 7], [filled(3)], cache_type="user")
    directory = tmp_path / "identity-a"
    assert save_entries(store, "m", store.held_keys("m"), directory, "identity-a").saved == 2
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in directory.iterdir())
    fresh = AlignedPromptCache(max_size=4)
    assert restore_entries(fresh, "m", directory, "identity-a", LAYOUT).restored == 2
    cache, rest = fresh.fetch_nearest_cache("m", [*range(10), 42])
    assert cache is not None and cache[0].offset == 10 and rest == [42]
    other = AlignedPromptCache(max_size=4)
    assert restore_entries(other, "m", directory, "identity-b", LAYOUT).restored == 0
    assert other.fetch_nearest_cache("m", [*range(10), 42]) == (None, [*range(10), 42])


def test_the_disk_limit_drops_the_least_recently_used_entries(tmp_path: Path) -> None:
    """Past the limit, the oldest saved entries across every identity are deleted first."""
    store = AlignedPromptCache(max_size=8)
    for first in range(3):
        store.insert_cache("m", [first] * 50, [filled(50)])
    for index, (tokens, kind) in enumerate(store.held_keys("m")):
        save_entries(store, "m", [(tokens, kind)], tmp_path / f"identity-{index}", f"identity-{index}")
        time.sleep(0.01)
    sizes = sorted(p.stat().st_size for p in tmp_path.glob("*/*.safetensors"))
    assert enforce_limit(tmp_path, sizes[0] * 2) <= sizes[0] * 2
    assert sorted(p.parent.name for p in tmp_path.glob("*/*.safetensors")) == ["identity-1", "identity-2"]
