"""Fleets for the gateway unit tests: a chat model beside an embedding model."""

from __future__ import annotations

from pathlib import Path

from mlx_agent.gateway.door.config import parse_config
from mlx_agent.gateway.models.fleet import Fleet
from tests.gateway_support import gateway_config


def fleet(tmp_path: Path) -> Fleet:
    """Return a fleet of a chat model (org/tiny) and an embedding model (embed, alias text-embedding-*)."""
    config = gateway_config(
        tmp_path,
        8080,
        ["python", "w.py", "--port", "{port}"],
        model_path=tmp_path / "tiny",
        socket_dir=str(tmp_path / "sockets"),  # its own, not a temp one left for the next front to sweep
    )
    config["models"][0]["worker"]["kind"] = "text"
    embed = {
        **config["models"][0],
        "served_model_name": "embed",
        "alias": ["text-embedding-*"],
        "hidden_names": [str(tmp_path / "embed")],
        "worker": {**config["models"][0]["worker"], "kind": "embedding"},
    }
    config["models"].append(embed)
    return Fleet(parse_config(config))
