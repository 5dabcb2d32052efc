"""A front over the real wrapped mlx-vlm worker, configured as ``serve`` plans one (socket, readiness, kind, name)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from mlx_agent.wire import SOCKET_FLAG
from tests.conftest import free_port
from tests.contract_support import contract
from tests.gateway_support import Gateway, gateway_config, start_gateway

# The worker's and the front's reply limit: these tests read prompts and refusals, never long replies.
MAX_TOKENS = 4


@contextlib.contextmanager
def vision_front(directory: Path, model: Path) -> Iterator[Gateway]:
    """Run a front over the wrapped mlx-vlm worker on ``model`` (worker kind ``vision``); stop both afterwards."""
    entry = [sys.executable, "-m", "mlx_agent.runtime", "mlx-vlm"]
    argv = [*entry, "--model", str(model), "--max-tokens", str(MAX_TOKENS), SOCKET_FLAG, "{socket}", *contract()]
    config = gateway_config(directory, free_port(), argv, model_path=model, max_tokens=MAX_TOKENS)
    worker = config["models"][0]["worker"]
    worker.update(kind="vision", model_name=str(model))  # mlx_vlm serves its model under its path
    worker["readiness"] = {"path": "/health", "status": 200, "json": {"status": "healthy"}, "nonnull": ["loaded_model"]}
    gateway = start_gateway(directory, config)
    try:
        yield gateway
    finally:
        gateway.stop()
