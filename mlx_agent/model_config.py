"""What a model's config.json says of it that both the plan and the front read: vision markers, context window."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Keys whose non-null presence in config.json means a vision tower (mlx-vlm's model types carry one of them).
VISION_MARKERS = ("vision_config", "vision_tower", "mm_vision_tower", "visual", "image_token_index", "image_token_id")
CONTEXT_KEYS = ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions")


def vision_markers(config: dict[str, Any]) -> list[str]:
    """Return the vision markers present (non-null) in a config."""
    return [key for key in VISION_MARKERS if config.get(key) is not None]


def context_window(config: dict[str, Any]) -> int | None:
    """Return the model's context window from its config.json (its text config for a vision model), if given."""
    text = config.get("text_config")
    for doc in (config, text if isinstance(text, dict) else {}):
        for key in CONTEXT_KEYS:
            value = doc.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None
