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

from typing import Any

from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache


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
    """An ``LRUPromptCache`` whose entries are aligned with their keys when stored."""

    def insert_cache(self, model: Any, tokens: list[int], prompt_cache: list[Any], **kwargs: Any) -> None:
        """Store ``prompt_cache`` under ``tokens``, both first cut to the positions every layer holds."""
        super().insert_cache(model, align(list(tokens), prompt_cache), prompt_cache, **kwargs)
