"""What ``serve top`` shows: every server of this home, read from its front's control channel, once a refresh.

Each receipt's front is asked for its state (``GET /mlx-agent/status``) only once it has given the proof
``serve status`` takes (``readiness.front_answers``: the control token and a fresh challenge), so a process
squatting a port is never shown as ours and never sees the token; nothing is read from logs. ``snapshot``
returns one JSON-ready document::

    {"time", "machine_memory": {"total_bytes", "available_bytes"},
     "servers": [{"port", "mode", "state", "error", "models": [MODEL, ...]}]}

and each ``MODEL`` is ``model_view`` of the model's state: its name and state, its load and prefill progress,
its worker's resident memory and the plan's estimate, requests in flight and waiting, and its last minute
(tokens/s, time to first token, prompt-cache hit share, prefill tokens/s, the tokens of each second), and an
mlx-vlm chat model's caches (its prefix cache's blocks and hits, its vision cache's size). A front older than a
field shows ``null`` for it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mlx_agent.files import utc_iso
from mlx_agent.supervise import process
from mlx_agent.supervise.readiness import front_answers
from mlx_agent.supervise.receipts import has_front, is_unit, read_receipt, receipt_files

STATUS_TIMEOUT_S = 1.0


def _prefill(entries: object) -> dict[str, Any] | None:
    """Sum the prefills in progress: tokens read of those to read, and the fastest rate among them."""
    if not isinstance(entries, list) or not entries:
        return None
    done = sum(e.get("processed_tokens") or 0 for e in entries if isinstance(e, dict))
    total = sum(e.get("prompt_tokens") or 0 for e in entries if isinstance(e, dict))
    rates = [e["tokens_per_second"] for e in entries if isinstance(e, dict) and e.get("tokens_per_second")]
    return {
        "requests": len(entries),
        "processed_tokens": done,
        "prompt_tokens": total,
        "fraction": round(done / total, 4) if total else None,
        "tokens_per_second": max(rates) if rates else None,
    }


# What top shows of mlx-vlm's prefix cache report (its /v1/cache/stats figures, read with the control token).
PREFIX_FIGURES = ("enabled", "loaded", "pool_used", "num_blocks", "lookups_hit", "lookups_miss", "matched_tokens")


def caches_view(caches: object) -> dict[str, Any] | None:
    """Return an mlx-vlm model's cache figures for top: the prefix cache's counters and the vision cache's size."""
    if not isinstance(caches, dict):
        return None
    prefix = caches.get("prefix") or {}
    figures = {**prefix, **(prefix.get("stats") or {})}
    return {
        "prefix": {k: figures.get(k) for k in PREFIX_FIGURES},
        "resident_bytes": figures.get("resident_bytes"),
        "disk_bytes": figures.get("disk_bytes"),
        "vision_cache_size": (caches.get("vision") or {}).get("size"),
    }


def model_view(model: dict[str, Any]) -> dict[str, Any]:
    """Return what ``top`` shows of one model's state (``records.ModelState``; missing fields are null)."""
    window = model.get("window") or {}
    queue = model.get("queue") or {}
    error = model.get("last_error") or None
    load = model.get("load_progress") or None
    worker = model.get("worker") or {}
    return {
        "name": model.get("name"),
        "model_state": model.get("model_state"),
        "load_progress": None if load is None else load.get("fraction"),
        "load_bytes": None if load is None else [load.get("loaded_bytes"), load.get("total_bytes")],
        "prefill": _prefill(model.get("prefill")),
        "worker_pid": worker.get("pid"),
        "worker_rss_bytes": model.get("worker_rss_bytes"),
        "memory_estimate_bytes": model.get("memory_estimate_bytes"),
        "in_flight": (model.get("open_requests") or 0) + (model.get("open_streams") or 0),
        "waiting": queue.get("waiting"),
        "tokens_per_second": window.get("tokens_per_second"),
        "ttft_ms": window.get("ttft_ms"),
        "cache_hit_share": window.get("cache_hit_share"),
        "prefill_tokens_per_second": window.get("prefill_tokens_per_second"),
        "requests": window.get("requests"),
        "tokens_series": window.get("tokens_series") or [],
        "loads": model.get("loads"),
        "evictions": model.get("evictions"),
        "caches": caches_view(model.get("caches")),
        "last_error": None if error is None else {"code": error.get("code"), "message": error.get("message")},
    }


def server_view(path: Path) -> dict[str, Any] | None:
    """Return one receipt's server as ``top`` shows it (None for a server without a front)."""
    from mlx_agent.errors import MlxAgentError, ReceiptError
    from mlx_agent.supervise.front import _call

    port = int(path.stem)
    try:
        receipt = read_receipt(path)
    except ReceiptError as exc:
        return {"port": port, "mode": None, "state": "unreadable", "error": exc.message, "models": []}
    if not has_front(receipt):
        return None
    state = "installed" if is_unit(receipt) else process.classify(receipt)
    view: dict[str, Any] = {"port": port, "mode": receipt["plan"]["front"]["mode"], "state": state, "error": None}
    names = [m["served_model_name"] for m in receipt["plan"]["models"]]
    models: list[dict[str, Any]] = [model_view({"name": n, "model_state": None}) for n in names]
    if state in ("running", "installed"):
        if not front_answers(receipt):  # the same proof as serve status; without it, no token is sent
            view["error"] = "the front does not answer with its proof"
        else:
            try:
                code, doc = _call(receipt, "GET", "status", timeout=STATUS_TIMEOUT_S)
            except MlxAgentError as exc:
                view["error"] = exc.message
            else:
                if code == 200:
                    view["mode"] = doc.get("mode", view["mode"])
                    models = [model_view(m) for m in doc.get("models") or [] if isinstance(m, dict)]
                else:
                    view["error"] = f"status answered HTTP {code}"
    view["models"] = models
    return view


def machine_memory() -> dict[str, int | None]:
    """Return this machine's total and available memory (the fronts of this home run on it)."""
    try:
        import psutil

        memory = psutil.virtual_memory()
    except Exception:  # psutil raises platform-specific errors
        return {"total_bytes": None, "available_bytes": None}
    return {"total_bytes": int(memory.total), "available_bytes": int(memory.available)}


def snapshot(directory: Path) -> dict[str, Any]:
    """Return every server of the receipts in ``directory`` as ``top`` shows them (module docstring)."""
    servers = [v for v in (server_view(p) for p in receipt_files(directory)) if v is not None]
    return {"time": utc_iso(time.time()), "machine_memory": machine_memory(), "servers": servers}
