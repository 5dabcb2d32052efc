"""A server previewed and confirmed through the CLI once, for the tests that only read its plan, receipt and replies."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import Agent, free_port


@dataclass
class Launched:
    """A running server the CLI started: the CLI's home, its port, the plan its preview printed and the receipt."""

    agent: Agent
    port: int
    plan: dict[str, Any]
    receipt: dict[str, Any]


@contextmanager
def launched(directory: Path, *args: str) -> Iterator[Launched]:
    """Preview and confirm ``serve start ARGS`` on a free port, in a home under ``directory``; stop it afterwards."""
    home = directory / "home"
    home.mkdir()
    agent = Agent(home, {**os.environ, "MLX_AGENT_HOME": str(home), "HF_HOME": str(directory / "hf")})
    port = str(free_port())
    preview = agent.run("serve", "start", *args, "--port", port)
    assert preview.rc == 0, preview.stdout + preview.stderr
    plan: dict[str, Any] = preview.data["plan"]
    confirm = agent.run("serve", "start", *args, "--port", port, "--confirm", "--preview-hash", plan["preview_hash"])
    assert confirm.rc == 0, confirm.stdout + confirm.stderr
    try:
        yield Launched(agent, int(port), plan, confirm.data["receipt"])
    finally:
        stop = agent.run("serve", "stop", "--port", port)
        assert stop.rc == 0, stop.stdout + stop.stderr
