"""What the front shows of a model while it works: load and prefill progress, worker memory, the last minute.

Our entry writes its progress to a file beside its socket (``runtime/serving/progress.py``); the front reads it
when status or ``/metrics`` asks, and every ``Fleet`` watch tick (so the prefill tokens it reports land in the
second they were read, in ``samples``). A worker that is not one of our entries (a native runtime) writes
none: its load and prefill progress are ``null``.

In a model's status:

* ``load_progress``: while the model is ``loading``, ``{"loaded_bytes", "total_bytes", "fraction",
  "started_at"}``: the bytes of its parameters read from the weight files so far, of all of them; null
  otherwise, or before the worker has begun to read (importing the runtime comes first);
* ``prefill``: one entry per request still reading its prompt: ``{"processed_tokens", "prompt_tokens",
  "fraction", "tokens_per_second", "started_at"}`` (prompt tokens the cache did not already hold are what it
  reads; the rate counts the steps after the first);
* ``worker_rss_bytes``: the worker's resident memory (its process and theirs it started), from psutil;
* ``window``: the last minute (``samples.Ring.window``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict

from mlx_agent.files import utc_iso

if TYPE_CHECKING:
    from mlx_agent.gateway.models.lifecycle import Lifecycle
    from mlx_agent.gateway.models.worker import WorkerProcess
    from mlx_agent.gateway.observe.samples import Samples
    from mlx_agent.records.front import LoadProgress, MachineMemory, ModelWindow, PrefillProgress


def read_progress(path: Path | None) -> dict[str, Any] | None:
    """Return the worker's progress document, or None when it has written none (or none readable)."""
    if path is None:
        return None
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _fraction(done: object, total: object) -> float | None:
    if not isinstance(done, int) or not isinstance(total, int) or total <= 0:
        return None
    return round(min(1.0, max(0.0, done / total)), 4)


def load_progress(doc: dict[str, Any] | None) -> LoadProgress | None:
    """Return a load's progress from the worker's document (None once done, or before it began)."""
    load = (doc or {}).get("load")
    if not isinstance(load, dict) or load.get("done"):
        return None
    loaded, total = load.get("loaded_bytes"), load.get("total_bytes")
    started = load.get("started_at")
    return {
        "loaded_bytes": loaded,
        "total_bytes": total,
        "fraction": _fraction(loaded, total),
        "started_at": utc_iso(started) if isinstance(started, int | float) else None,
    }


def prefills(doc: dict[str, Any] | None) -> list[PrefillProgress]:
    """Return the prefills in progress from the worker's document."""
    out: list[PrefillProgress] = []
    for entry in (doc or {}).get("prefill") or []:
        if not isinstance(entry, dict):
            continue
        processed, total = entry.get("processed"), entry.get("total")
        first, started, updated = entry.get("first_processed"), entry.get("started_at"), entry.get("updated_at")
        rate = None
        numbers = (processed, first, started, updated)
        if all(isinstance(v, int | float) for v in numbers) and updated > started:  # type: ignore[operator]
            rate = round((processed - first) / (updated - started), 1)  # type: ignore[operator]
        out.append(
            {
                "processed_tokens": processed,
                "prompt_tokens": total,
                "fraction": _fraction(processed, total),
                "tokens_per_second": rate,
                "started_at": utc_iso(started) if isinstance(started, int | float) else None,
            }
        )
    return out


def resident_bytes(pid: int) -> int | None:
    """Return the resident memory of ``pid`` and its descendants (a group's launcher starts its ranks)."""
    import psutil

    try:
        root = psutil.Process(pid)
        total = int(root.memory_info().rss)
        for child in root.children(recursive=True):
            try:
                total += int(child.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
        return None
    return total


class LiveFields(TypedDict):
    """The fields of a model's status this module fills in."""

    load_progress: LoadProgress | None
    prefill: list[PrefillProgress]
    worker_rss_bytes: int | None
    window: ModelWindow


@dataclass
class Watched:
    """What the front last read of one worker's progress: its prefill count, to add only what is new."""

    pid: int | None = None
    prefill_tokens: int = 0
    doc: dict[str, Any] | None = field(default=None, repr=False)


class Progress:
    """Reads each model's worker progress and adds the prefill tokens it reports to the model's samples."""

    def __init__(self, samples: Samples) -> None:
        self.samples = samples
        self.watched: dict[str, Watched] = {}

    def poll(self, model: Lifecycle) -> dict[str, Any] | None:
        """Read ``model``'s worker's progress now; count the prefill tokens read since the last poll."""
        worker: WorkerProcess | None = model.worker
        seen = self.watched.setdefault(model.name, Watched())
        if worker is None:
            seen.pid, seen.prefill_tokens, seen.doc = None, 0, None
            return None
        doc = read_progress(worker.progress_path)
        if seen.pid != worker.pid:  # a new worker counts from nothing
            seen.pid, seen.prefill_tokens = worker.pid, 0
        count = (doc or {}).get("prefill_tokens")
        if isinstance(count, int) and count > seen.prefill_tokens:
            self.samples.ring(model.name).prefill(count - seen.prefill_tokens)
            seen.prefill_tokens = count
        seen.doc = doc
        return doc

    def fields(self, model: Lifecycle) -> LiveFields:
        """Return the live fields of ``model``'s status (module docstring)."""
        doc = self.poll(model)
        worker = model.worker
        return {
            "load_progress": load_progress(doc) if model.state == "loading" else None,
            "prefill": prefills(doc) if model.state != "loading" else [],
            "worker_rss_bytes": None if worker is None else resident_bytes(worker.pid),
            "window": self.samples.ring(model.name).window(),
        }


def machine_memory() -> MachineMemory:
    """Return the machine's memory: total and available now (None when psutil cannot tell)."""
    try:
        import psutil

        memory = psutil.virtual_memory()
    except Exception:  # psutil raises platform-specific errors; unknown then
        return {"total_bytes": None, "available_bytes": None}
    return {"total_bytes": int(memory.total), "available_bytes": int(memory.available)}
