"""Where mlx-agent keeps its state: receipts, logs, locks, saved previews and wired configs."""

from __future__ import annotations

import os
from pathlib import Path


def agent_home() -> Path:
    """Return ``$MLX_AGENT_HOME`` (default ``~/.mlx-agent``) as an absolute path."""
    raw = os.environ.get("MLX_AGENT_HOME")
    return Path(raw).expanduser().absolute() if raw else Path.home() / ".mlx-agent"


def receipts_base(override: str | os.PathLike[str] | None = None) -> Path:
    """Return the receipts base directory: ``--receipts-dir`` if given, else ``$MLX_AGENT_HOME/receipts``."""
    if override is not None:
        return Path(override).expanduser().absolute()
    return agent_home() / "receipts"


def receipts_dir(kind: str, override: str | os.PathLike[str] | None = None) -> Path:
    """Return the directory holding receipts of one kind (``serve``, ``train``)."""
    return receipts_base(override) / kind


def previews_dir() -> Path:
    """Return where previews are saved so a stale confirm can show what changed."""
    return agent_home() / "previews"


def wired_dir() -> Path:
    """Return the directory of wired configs (endpoints other tools expect to find)."""
    return agent_home() / "wired"
