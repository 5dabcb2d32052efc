"""Request bodies for the gateway unit tests: a valid front config's one model, and a chat body."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlx_agent.gateway.door.config import parse_config
from mlx_agent.records.front import FrontModelConfig
from tests.gateway_support import gateway_config


def model(**fields: Any) -> FrontModelConfig:
    """Return the one model of a valid front config, with ``fields`` changed."""
    config = gateway_config(
        Path("/tmp/x"), 8080, ["python", "w.py", "--port", "{port}"], model_path=Path("/m/tiny"), **fields
    )
    parsed: FrontModelConfig = parse_config(config)["models"][0]
    return parsed


def chat(**fields: Any) -> dict[str, Any]:
    """Return a chat body with ``fields`` added."""
    return {"messages": [{"role": "user", "content": "hi"}], **fields}
