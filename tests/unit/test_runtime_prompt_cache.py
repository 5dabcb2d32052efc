"""The prompt cache stores entries whose cached positions match their keys (speculative decoding runs ahead)."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlx_agent.runtime.prompt_cache import AlignedPromptCache, align


def filled(positions: int) -> KVCache:
    """Return one KV cache layer holding ``positions`` positions."""
    layer = KVCache()  # type: ignore[no-untyped-call]
    keys = mx.zeros((1, 2, positions, 4))
    layer.update_and_fetch(keys, keys)  # type: ignore[no-untyped-call]
    return layer


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
