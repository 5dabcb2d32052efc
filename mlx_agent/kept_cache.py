"""Which saved prompt cache a worker may restore: one directory per model identity, named by the front.

The identity is the sha256 of what decides the cached keys and values, read from the model's front config:
the base and draft models' bound files, the worker's argv template (model path, adapter and its digests,
template arguments, thinking, KV bits, draft flags) and the runtime files rechecked at every load (interpreter,
entry, mlx_lm's sources). A model, adapter, template or runtime that changed gets another directory, so it
never restores another's entries (each entry also carries the identity, checked when restored). The front
computes it at each spawn and ``serve status`` from the receipt, the same way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from mlx_agent.canonical import canonical_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.records import FrontModelConfig


def cache_identity(model: FrontModelConfig) -> str:
    """Return the sha256 naming the saved prompt cache of ``model``."""
    parts = {
        "source": model["source"],
        "draft": model["draft_source"],
        "argv": model["worker"]["argv"],
        "runtime": model["runtime_checks"],
    }
    return hashlib.sha256(canonical_json(parts).encode()).hexdigest()


def cache_dir(model: FrontModelConfig) -> Path | None:
    """Return the directory of ``model``'s saved prompt cache, or None when it keeps none."""
    record = model["prompt_cache"]
    return None if record is None else Path(record["root"]) / cache_identity(model)
