"""The progress file a worker writes (runtime/serving/progress.py) and what the front reads of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlx_agent.gateway.models.progress import load_progress, prefills, read_progress
from mlx_agent.runtime.serving.progress import Board, ending

pytestmark = pytest.mark.fast


def test_a_load_counts_bytes_read_until_done(tmp_path: Path) -> None:
    """Each part read grows the load's count; a draft model adds to the total; done hides it from the front."""
    path = tmp_path / "0-1.progress"
    board = Board(path)
    board.load_begin(1000)
    board.load_advance(250)
    doc = read_progress(path)
    assert load_progress(doc) == {
        "loaded_bytes": 250,
        "total_bytes": 1000,
        "fraction": 0.25,
        "started_at": load_progress(doc)["started_at"],  # type: ignore[index]
    }
    board.load_begin(1000)  # the draft model
    board.load_advance(750)
    progress = load_progress(read_progress(path))
    assert progress is not None and progress["fraction"] == 0.5 and progress["total_bytes"] == 2000
    board.load_end()
    assert load_progress(read_progress(path)) is None
    assert json.loads(path.read_text())["load"]["done"] is True


def test_prefills_come_and_go_and_count_tokens(tmp_path: Path) -> None:
    """A prefill appears at its first step, goes at its last (or when its reply ends); tokens read add up."""
    path = tmp_path / "0-1.progress"
    board = Board(path)
    board.prefill(1, 64, 256)
    board.prefill(2, 10, 10)  # read in one step: never listed, still counted
    entries = prefills(read_progress(path))
    assert [(e["processed_tokens"], e["prompt_tokens"], e["fraction"]) for e in entries] == [(64, 256, 0.25)]
    board.prefill(1, 256, 256)
    doc = read_progress(path)
    assert prefills(doc) == [] and doc is not None and doc["prefill_tokens"] == 266
    board.prefill(3, 32, 128)
    assert list(ending(3, iter(["token"]), board)) == ["token"]  # the first token ends the prefill
    assert prefills(read_progress(path)) == []


def test_rates_and_unreadable_files(tmp_path: Path) -> None:
    """A prefill's rate counts the steps after its first; a missing or damaged file reads as no progress."""
    doc = {
        "prefill": [{"processed": 300, "total": 900, "first_processed": 100, "started_at": 10.0, "updated_at": 12.0}]
    }
    assert prefills(doc)[0]["tokens_per_second"] == 100.0
    assert read_progress(tmp_path / "missing") is None and read_progress(None) is None
    (tmp_path / "bad").write_text("{not json")
    assert read_progress(tmp_path / "bad") is None
    assert load_progress(None) is None and prefills(None) == []


def test_a_board_without_a_file_writes_nothing(tmp_path: Path) -> None:
    """A worker started without the front's variable keeps its counts and writes no file."""
    board = Board(None)
    board.load_begin(10)
    board.prefill(1, 1, 2)
    assert board.document()["prefill_tokens"] == 1 and list(tmp_path.iterdir()) == []
