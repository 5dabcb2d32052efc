"""The human ``serve status`` table shows a load's and a prefill's progress where the JSON has them."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from mlx_agent.cli import render

pytestmark = pytest.mark.fast


def status_model(name: str, state: str, **fields: Any) -> dict[str, Any]:
    """Return one model of a server as ``serve status --json`` gives it (the fields the table reads)."""
    return {
        "name": name,
        "model_state": state,
        "worker": {"pid": 4242},
        "loads": 1,
        "evictions": 0,
        "last_used": "2026-12-02T06:40:00Z",
        "memory_estimate_bytes": 2_000_000_000,
        "load_progress": None,
        "prefill": [],
        **fields,
    }


def table_of(monkeypatch: pytest.MonkeyPatch, models: list[dict[str, Any]]) -> str:
    """Render one running server with ``models`` and return the text a person reads."""
    console = Console(record=True, width=200)
    monkeypatch.setattr(render, "out", console)
    server = {"port": 8080, "state": "running", "mode": "jit", "pid": 77, "models": models}
    render.render_status({"servers": [server], "receipts_dir": "/tmp/r"}, [])
    return console.export_text()


def prefill(fraction: float) -> dict[str, Any]:
    """Return one prefill entry as the front reports it."""
    return {"processed_tokens": 10, "prompt_tokens": 20, "fraction": fraction, "tokens_per_second": None}


def test_loading_and_prefill_show_their_percentages(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loading model reads 'loading 42%', one prefilling 'prefill 37%' (+N for more), others their state."""
    text = table_of(
        monkeypatch,
        [
            status_model(
                "org/cold", "loading", load_progress={"loaded_bytes": 42, "total_bytes": 100, "fraction": 0.42}
            ),
            status_model("org/busy", "loaded", prefill=[prefill(0.37)]),
            status_model("org/two", "loaded", prefill=[prefill(0.1), prefill(0.9)]),
            status_model("org/idle", "loaded"),
            status_model("org/early", "loading"),  # before the worker has begun to read
        ],
    )
    rows = {line.split("│")[4].strip(): line.split("│")[6].strip() for line in text.splitlines() if "org/" in line}
    assert rows == {
        "org/cold": "loading 42%",
        "org/busy": "prefill 37%",
        "org/two": "prefill 10% (+1)",
        "org/idle": "loaded",
        "org/early": "loading",
    }, text


def test_each_model_row_says_what_the_model_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kind column reads each model's kind (a chat model 'text', a speech model 'speech'), '-' when unknown."""
    text = table_of(
        monkeypatch,
        [
            status_model("org/chat", "loaded", kind="text"),
            status_model("org/voice", "unloaded", kind="speech"),
            status_model("org/old", "loaded"),
        ],
    )
    kinds = {line.split("│")[4].strip(): line.split("│")[5].strip() for line in text.splitlines() if "org/" in line}
    assert kinds == {"org/chat": "text", "org/voice": "speech", "org/old": "-"}, text
