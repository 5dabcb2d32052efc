"""A group's load read in parts (``progress.sharded_loading``) and prefills dropped by mlx_vlm (``prefill_keep``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx

from mlx_agent.gateway.models.progress import prefills, read_progress
from mlx_agent.runtime.serving.progress import LOAD_STEPS, Board, sharded_loading


class Recording(Board):
    """A board that also keeps every count of bytes read, in order."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.parts: list[int] = []

    def load_advance(self, nbytes: int) -> None:
        """Record the part, then count it."""
        self.parts.append(nbytes)
        super().load_advance(nbytes)


def test_a_sharded_load_evaluates_its_parameters_in_parts(tmp_path: Path) -> None:
    """The one mx.eval of a parameter dict goes in parts on the board; other evaluations and mx.eval are kept."""
    board = Recording(tmp_path / "0-1.progress")
    original = mx.eval
    scalars: list[Any] = []

    def sharded_load(repo: str, pipeline_group: Any = None, tensor_group: Any = None) -> dict[str, Any]:
        parameters = {"layers": [{"weight": mx.ones((64, 64)) * i} for i in range(100)]}  # lazy: nothing read
        mx.eval(parameters)
        total = mx.array(1.0) + 1
        mx.eval(total)  # as sharded_load's closing collective: not a parameter tree
        scalars.append(total)
        return parameters

    parameters = sharded_loading(sharded_load, board)("repo")
    assert mx.eval is original  # restored once the load returns
    layer_bytes = 64 * 64 * 4
    assert len(board.parts) >= LOAD_STEPS // 2 and sum(board.parts) == 100 * layer_bytes, board.parts
    assert board.load is not None and board.load["total_bytes"] == 100 * layer_bytes
    assert float(parameters["layers"][99]["weight"][0, 0]) == 99.0 and float(scalars[0]) == 2.0


def test_prefills_of_requests_no_longer_served_go(tmp_path: Path) -> None:
    """``prefill_keep`` forgets every prefill but those of the requests still served."""
    path = tmp_path / "0-1.progress"
    board = Board(path)
    board.prefill(1, 64, 256)
    board.prefill(2, 32, 256)
    board.prefill_keep({2})
    assert [e["processed_tokens"] for e in prefills(read_progress(path))] == [32]
    board.prefill_keep(())
    assert prefills(read_progress(path)) == []
