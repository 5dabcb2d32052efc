"""Where mlx-agent keeps its state: receipts, logs, locks, saved previews and wired configs.

Each state directory that exists must be the user's own and writable by no one else (``files.check_private_dir``);
new ones are created 0700 when something is first written there.
"""

from __future__ import annotations

import os
from pathlib import Path

from mlx_agent.files import check_private_dir


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
    """Return the directory holding receipts of one kind (``serve``, ``train``), refusing an unsafe one."""
    base = receipts_base(override)
    if override is None:
        check_private_dir(agent_home())
    check_private_dir(base)
    return check_private_dir(base / kind)


def previews_dir() -> Path:
    """Return where previews are saved so a stale confirm can show what changed."""
    return check_private_dir(agent_home() / "previews")


def wired_dir() -> Path:
    """Return the directory of wired configs (endpoints other tools expect to find)."""
    return agent_home() / "wired"
