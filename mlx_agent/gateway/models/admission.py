"""The policy a front persists after ``serve policy``, and how long a refused load asks its client to wait.

The admission rule itself (weights x 1.10 + 1.5 GB + the reserve, against fresh available memory) is
``load_memory``, which `mlx-agent models` reads too. The persisted policy file, ``{"format_version",
"min_headroom_gb", "models": {name: {"idle_timeout", "keep_loaded"}}, "updated_at"}``, is written atomically
(0600) and wins over the config's at the next start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlx_agent.errors import FrontConfigInvalid, PolicyRejected
from mlx_agent.files import utc_now
from mlx_agent.policy import parse_policy
from mlx_agent.wire import POLICY_FILE_VERSION

if TYPE_CHECKING:
    from mlx_agent.policy import Policy

RETRY_AFTER_S = 30


def policy_file(min_headroom_gb: float | None, models: dict[str, Policy]) -> dict[str, Any]:
    """Return what the policy file holds: the front's reserve and each model's idle policy."""
    return {
        "format_version": POLICY_FILE_VERSION,
        "min_headroom_gb": min_headroom_gb,
        "models": {name: {"idle_timeout": p.idle_timeout, "keep_loaded": p.keep_loaded} for name, p in models.items()},
        "updated_at": utc_now(),
    }


def read_policy_file(path: Path) -> tuple[float | None, dict[str, Policy]] | None:
    """Return the persisted reserve and per-model policies, or None without a file; refuse an unusable one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FrontConfigInvalid(f"cannot read policy file {path}: {exc.strerror}") from exc
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not str(doc.get("format_version", "")).startswith("2."):
            raise ValueError("an unsupported format_version")
        reserve = doc.get("min_headroom_gb")
        models = doc.get("models")
        if not isinstance(models, dict):
            raise ValueError("no models object")
        policies = {
            str(name): parse_policy({**entry, "min_headroom_gb": reserve})
            if isinstance(entry, dict)
            else parse_policy(entry)
            for name, entry in models.items()
        }
    except (ValueError, PolicyRejected) as exc:
        raise FrontConfigInvalid(f"policy file {path} is unusable: {exc}") from exc
    return reserve, policies
