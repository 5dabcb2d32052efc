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
from typing import Any

from mlx_agent.canonical import canonical_json
from mlx_agent.wire import PROMPT_CACHE_QUARANTINE, PROMPT_CACHE_REPORT

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.records.front import FrontModelConfig


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


def kept_cache_health(directory: Path) -> dict[str, Any]:
    """Return what ``serve status`` adds about a kept cache: entries quarantined, and why none can be restored.

    ``quarantined`` counts the entries a worker refused (damaged, or not this model's) and moved aside;
    ``refused`` is why the directory (or the prompt-cache root) is not private, so that the next worker starts
    without the kept cache, else None.
    """
    from mlx_agent.errors import MlxAgentError
    from mlx_agent.files import check_private_dir

    refused = None
    for path in (directory.parent, directory):
        try:
            check_private_dir(path)
        except MlxAgentError as exc:
            refused = exc.message
            break
    return {"quarantined": quarantined_count(directory), "refused": refused}


def read_report(path: Path) -> dict[str, Any]:
    """Return the save report at ``path`` (``runtime.serving.prompt_cache.write_report``), or {} if none."""
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def last_save(directory: Path) -> dict[str, Any] | None:
    """Return what the last save into ``directory`` did (saved, skipped at the floor, failed), or None."""
    return read_report(directory / PROMPT_CACHE_REPORT) or None


def quarantined_count(directory: Path) -> int:
    """Return how many entries of ``directory`` are in its quarantine folder."""
    where = directory / PROMPT_CACHE_QUARANTINE
    try:
        return sum(1 for p in where.iterdir() if p.name.endswith(".safetensors")) if where.is_dir() else 0
    except OSError:
        return 0


def effective_limit(root: Path, disk_gb: float) -> dict[str, Any]:
    """Return the kept cache's limit as a worker would apply it now (``disk.cache_limit``), and its disk.

    ``limit_bytes`` is ``min(disk_gb, half of free + kept)``: what a worker starting or saving now would hold
    the home's entries to; ``disk`` is the free space of the file system the entries are on.
    """
    from mlx_agent.disk import cache_limit, disk_space

    configured = int(disk_gb * 1e9)
    space = disk_space(root)
    if space is None:
        return {"limit_bytes": configured, "disk": None}
    kept = 0
    for path in [*root.glob(f"*/{PROMPT_CACHE_QUARANTINE}/*.safetensors"), *root.glob("*/*.safetensors")]:
        if not path.name.startswith("."):
            try:
                kept += path.lstat().st_size
            except OSError:
                continue
    return {"limit_bytes": cache_limit(configured, space.free_bytes, kept), "disk": space.to_json()}


def disk_warnings(roots: dict[str, float]) -> list[str]:
    """Return what a preview says of each prompt-cache root (``{root: disk_gb}``) whose disk cuts its limit.

    The plan keeps the configured limit (it stays deterministic); the worker applies the effective one when it
    starts and when it saves, and ``serve status`` shows it as ``prompt_cache.limit_bytes``.
    """
    warnings = []
    for root, disk_gb in sorted(roots.items()):
        found = effective_limit(Path(root), disk_gb)
        disk = found["disk"]
        if disk is None:
            continue
        if disk["low"]:
            continue  # disk.floor_warnings says so, once per disk, with the server's other places
        if found["limit_bytes"] < int(disk_gb * 1e9):
            warnings.append(
                f"the disk of {root} has {disk['free_bytes'] / 1e9:.2f} GB free: a worker keeps at most "
                f"{found['limit_bytes'] / 1e9:.2f} GB of prompt caches there (half of free plus kept), not the "
                f"{disk_gb:g} GB of --prompt-cache-disk-gb, until space is freed"
            )
    return warnings
