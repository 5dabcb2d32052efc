"""A running eager front on the tiny model for the hostile-request tests, and raw HTTP to it."""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import Agent, free_port

HI: Any = [{"role": "user", "content": "hi"}]
CHAT: Any = {"model": "tiny", "messages": HI, "max_tokens": 2}


class Front:
    """A running eager front on the tiny model, and raw HTTP to it."""

    def __init__(self, agent: Agent, port: int) -> None:
        self.agent = agent
        self.port = port
        self.first_worker: int | None = None  # the worker's pid when the front was ready

    def send(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], Any]:
        """Send one request; return the status, headers and the parsed JSON answer."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        try:
            conn.request(
                method,
                path,
                body=data,
                headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01", **(headers or {})},
            )
            answer = conn.getresponse()
            text = answer.read()
            return answer.status, dict(answer.headers), json.loads(text) if text else None
        finally:
            conn.close()

    def healthy(self) -> bool:
        """Say whether a normal request is answered."""
        return self.send("POST", "/v1/chat/completions", CHAT)[0] == 200

    def models(self) -> dict[str, Any]:
        """Return this front's model in ``serve status``."""
        model: dict[str, Any] = self.agent.run("serve", "status").data["servers"][0]["models"][0]
        return model


@contextmanager
def running_front(tiny_model: Path, home: Path, *options: str) -> Iterator[Front]:
    """Start an eager front on the tiny model (served as ``tiny``, with ``serve start`` OPTIONS); stop it afterwards."""
    agent = Agent(home, {**os.environ, "MLX_AGENT_HOME": str(home)})
    port = free_port()
    agent.launch("--path", str(tiny_model), "--port", str(port), "--served-model-name", "tiny", *options)
    started = Front(agent, port)
    started.first_worker = started.models()["worker"]["pid"]
    try:
        yield started
    finally:
        agent.run("serve", "stop", "--port", str(port))
