"""A front over the real wrapped mlx-vlm worker: configured as ``serve`` plans one, or served by the CLI itself."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from mlx_agent.wire import SOCKET_FLAG
from tests.conftest import Agent, free_port
from tests.contract_support import contract
from tests.gateway_support import Gateway, gateway_config, serving

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
    with serving(directory, config) as gateway:
        yield gateway


@dataclass
class ServedVlm:
    """A model served by ``serve start --runtime mlx-vlm`` with no option: the CLI that served it, its port, receipt."""

    agent: Agent
    port: int
    receipt: dict[str, Any]

    @property
    def base_url(self) -> str:
        """Return the front's URL."""
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> openai.OpenAI:
        """Return the official openai client for the front."""
        return openai.OpenAI(base_url=self.base_url + "/v1", api_key="local", max_retries=0)


@contextlib.contextmanager
def served_vlm(directory: Path, model: Path) -> Iterator[ServedVlm]:
    """Preview and confirm ``serve start --path MODEL --runtime mlx-vlm`` in a home of its own; stop it afterwards."""
    home = directory / "home"
    home.mkdir()
    agent = Agent(home, {**os.environ, "MLX_AGENT_HOME": str(home), "HF_HOME": str(directory / "hf")})
    port = free_port()
    receipt = agent.launch("--path", str(model), "--runtime", "mlx-vlm", "--port", str(port))
    try:
        yield ServedVlm(agent, port, receipt)
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0
