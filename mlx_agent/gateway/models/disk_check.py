"""The front's view of its disks: ``/health``'s ``disk``, and a worker that stopped answering on a full disk.

A front writes its log and its workers' logs beside its receipt (the ``state`` place), and its workers save
their prompt caches under ``$MLX_AGENT_HOME/prompt-cache`` (the ``prompt_cache`` place; listed only when it is
on another file system). A worker whose log cannot grow breaks off every request (mlx_lm's handler logs each
one), so when a worker does not answer and one of these is under its floor (``mlx_agent.disk``), the request
gets 503 ``disk_full`` with the numbers, and the model's ``last_error`` says so, instead of 502
``worker_failed``. ``/health`` is open to any local client: it shows the places by role and their numbers, never
their paths (``serve status`` shows those).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlx_agent.api_errors import Code
from mlx_agent.disk import DiskSpace, disk_space, server_places
from mlx_agent.files import utc_iso
from mlx_agent.gateway.door.http_errors import refused

if TYPE_CHECKING:
    from mlx_agent.errors import RequestRefused
    from mlx_agent.gateway.models.fleet import Fleet
    from mlx_agent.gateway.models.lifecycle import Lifecycle
    from mlx_agent.records.front import FrontModelConfig

REMEDIATION = "free some space on that disk (or lower --prompt-cache-disk-gb); no restart is needed"


def model_places(model: FrontModelConfig) -> list[tuple[str, Path]]:
    """Return where a model's worker writes, by role: its log's directory, and its prompt cache's root."""
    return server_places(Path(model["worker"]["log_path"]).parent, [model])[1:]


def spaces(places: list[tuple[str, Path]]) -> list[tuple[str, DiskSpace]]:
    """Return each place's free space, one per file system (the first role names it)."""
    seen: dict[int, tuple[str, DiskSpace]] = {}
    for role, path in places:
        space = disk_space(path)
        if space is not None and space.device not in seen:
            seen[space.device] = (role, space)
    return list(seen.values())


def public(role: str, space: DiskSpace) -> dict[str, Any]:
    """Return what a client may see of one place: its role and numbers, not its path."""
    return {"place": role, "free_bytes": space.free_bytes, "floor_bytes": space.floor_bytes, "low": space.low}


def add_disk(doc: dict[str, Any], fleet: Fleet) -> None:
    """Add ``disk`` to a ``/health`` document, and make an ``ok`` status ``degraded`` when a place is low.

    The answer stays 200: the front listens and answers, and readiness and ``serve status`` probe it; the body
    says what is wrong (a stronger status, such as ``wedged``, is kept). ``ready`` is left as it is: a degraded
    front that has loaded its models is ready (``plan/front.FRONT_READINESS``), and ``serve start`` warns.
    """
    found = spaces(server_places(Path(fleet.config["policy_path"]).parent, [m.model for m in fleet.models]))
    doc["disk"] = [public(role, space) for role, space in found]
    if doc.get("status") == "ok" and any(space.low for _, space in found):
        doc["status"] = "degraded"


def disk_full(model: Lifecycle) -> RequestRefused | None:
    """Return the 503 ``disk_full`` for a worker that did not answer while its disk is full, else None.

    The model's ``last_error`` is set to it (with the paths), so ``serve status`` names the cause.
    """
    low = [(role, space) for role, space in spaces(model_places(model.model)) if space.low]
    if not low:
        return None
    what = "; ".join(space.describe() for _, space in low)
    message = f"the model worker could not answer because its disk is full: {what}; {REMEDIATION}"
    model.last_error = {
        "code": Code.DISK_FULL.value,
        "message": message,
        "at": utc_iso(time.time()),
        "details": {"disk": [{"place": role, **space.to_json()} for role, space in low]},
    }
    numbers = [public(role, space) for role, space in low]
    short = "; ".join(f"{role} has {s.free_bytes} bytes free (floor {s.floor_bytes})" for role, s in low)
    return refused(
        Code.DISK_FULL,
        f"the model worker could not answer because its disk is full: {short}",
        extra={"disk": numbers, "remediation": REMEDIATION},
    )
