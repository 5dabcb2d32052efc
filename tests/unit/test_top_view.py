"""What ``serve top`` draws from a snapshot, read as a person sees it, and what it collects per model."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from mlx_agent.cli.top_view import MEDIUM, WIDE, render, sparkline
from mlx_agent.supervise.top import model_view

pytestmark = pytest.mark.fast


def front_model(name: str, **fields: Any) -> dict[str, Any]:
    """Return a model's part of a front's state, as the front reports it."""
    return {
        "name": name,
        "model_state": "loaded",
        "worker": {"pid": 4242},
        "open_requests": 0,
        "open_streams": 0,
        "loads": 1,
        "evictions": 0,
        "memory_estimate_bytes": 2_000_000_000,
        "worker_rss_bytes": 1_500_000_000,
        "last_error": None,
        "load_progress": None,
        "prefill": [],
        "queue": {"waiting": 0},
        "window": {
            "tokens_per_second": 12.5,
            "ttft_ms": 85.0,
            "cache_hit_share": 0.75,
            "prefill_tokens_per_second": 300.0,
            "requests": 4,
            "tokens_series": [0] * 58 + [4, 8],
        },
        **fields,
    }


def screen(models: list[dict[str, Any]], width: int) -> str:
    """Return the text of the view of one server holding ``models``, drawn ``width`` columns wide."""
    snapshot = {
        "time": "2026-12-02T06:00:00.000Z",
        "machine_memory": {"total_bytes": 64_000_000_000, "available_bytes": 40_000_000_000},
        "servers": [{"port": 8123, "mode": "jit", "state": "running", "error": None, "models": models}],
    }
    console = Console(width=width, record=True, color_system=None)
    console.print(render(snapshot, width))
    return console.export_text()


def row(text: str, name: str) -> str:
    """Return the line of the view that shows ``name``."""
    return next(line for line in text.splitlines() if name in line)


def test_rows_show_state_memory_and_the_last_minute() -> None:
    """Each model's row shows its state, memory against the estimate, requests, tokens/s, TTFT and cache share."""
    text = screen([model_view(front_model("alpha")), model_view(front_model("beta", model_state="unloaded"))], WIDE)
    alpha = row(text, "alpha")
    assert "8123" in alpha and "jit" in alpha and "loaded" in alpha
    assert "1.5G/2.0G" in alpha and "0/0" in alpha and "12.5" in alpha and "85ms" in alpha and "75%" in alpha
    assert "unloaded" in row(text, "beta")
    assert "40.0G free of 64.0G" in text


def test_progress_and_busy_states() -> None:
    """A load shows its fraction read, a prefill its fraction of the prompt, open requests make a model busy."""
    loading = front_model("alpha", model_state="loading", load_progress={"fraction": 0.42})
    prefill = [{"processed_tokens": 300, "prompt_tokens": 1000, "tokens_per_second": 50.0}]
    reading = front_model("beta", open_streams=1, prefill=prefill)
    decoding = front_model("gamma", open_requests=2, queue={"waiting": 3})
    wedged = front_model("delta", model_state="wedged", last_error={"code": "worker_wedged", "message": "quiet"})
    text = screen([model_view(m) for m in (loading, reading, decoding, wedged)], WIDE)
    assert "loading 42%" in row(text, "alpha")
    assert "busy prefill 30%" in row(text, "beta")
    assert "busy" in row(text, "gamma") and "2/3" in row(text, "gamma")
    assert "wedged" in row(text, "delta") and "worker_wedged" in row(text, "delta")


def test_narrow_terminals_lose_the_sparkline_then_the_error() -> None:
    """The sparkline needs a wide terminal and the last error a medium one; the counters always show."""
    models = [model_view(front_model("alpha", last_error={"code": "load_failed", "message": "x"}))]
    assert "TOK/S 30s" in screen(models, WIDE)
    medium = screen(models, MEDIUM)
    assert "TOK/S 30s" not in medium and "load_failed" in medium
    narrow = screen(models, 100)
    assert "load_failed" not in narrow and "LOADS" in narrow


def test_an_80_column_terminal_shows_names_and_states_whole() -> None:
    """On a default 80-column terminal the counters give way first: model names and states are never cut short."""
    models = [model_view(front_model("qwen-coder-32b")), model_view(front_model("beta", model_state="unloaded"))]
    text = screen(models, 80)
    assert "qwen-coder-32b" in row(text, "qwen-coder-32b") and "loaded" in row(text, "qwen-coder-32b")
    assert "unloaded" in row(text, "beta") and "8123" in text and "jit" in text
    assert "…" not in text and "TOK/S" in text and "EVICT" not in text
    assert all(len(line) <= 80 for line in text.splitlines()[1:])


def test_sparkline_scales_to_its_largest_second() -> None:
    """The largest second is a full bar, an empty second a space, and only the last seconds are drawn."""
    assert sparkline([0, 1, 8], width=3) == " ▁█"
    assert sparkline([5] * 40, width=30) == "█" * 30
    assert sparkline([0, 0]) == "  "


def test_model_view_sums_prefills_and_tolerates_older_fronts() -> None:
    """Prefills in progress are summed; a front without the newer fields gives nulls, not an error."""
    prefill = [
        {"processed_tokens": 100, "prompt_tokens": 400, "tokens_per_second": 20.0},
        {"processed_tokens": 100, "prompt_tokens": 100, "tokens_per_second": None},
    ]
    view = model_view(front_model("alpha", prefill=prefill))
    assert view["prefill"] == {
        "requests": 2,
        "processed_tokens": 200,
        "prompt_tokens": 500,
        "fraction": 0.4,
        "tokens_per_second": 20.0,
    }
    old = model_view({"name": "old", "model_state": "loaded", "open_requests": 1, "open_streams": 0})
    assert old["in_flight"] == 1 and old["tokens_per_second"] is None and old["waiting"] is None
    assert "old" in screen([old], WIDE)
