"""Waiting for a launched server to answer, while watching that it is still alive."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from mlx_agent.errors import LaunchFailed, MlxAgentError, ReadinessTimeout, from_refusal_lines
from mlx_agent.files import log_tail

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Any

Tick = Callable[[float, str], None]
POLL_SECONDS = 0.25


def probe(host: str, port: int, readiness: dict[str, Any], timeout: float = 1.0) -> bool:
    """Say whether the server answers its readiness check as the recipe expects."""
    import http.client  # lazily: it drags in ssl and email, and most status calls probe nothing

    conn = http.client.HTTPConnection(host, port, timeout=readiness.get("timeout_s", timeout))
    try:
        post = readiness.get("post")
        if post is None:
            conn.request("GET", readiness["path"])
        else:  # a tiny real request: the only proof of a loaded model for a server whose /health answers early
            conn.request("POST", readiness["path"], body=json.dumps(post),
                         headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != readiness.get("status", 200):
            return False
        expected = readiness.get("json")
        nonnull = readiness.get("nonnull", [])
        if expected is None and not nonnull:
            return True
        data = json.loads(body)
        return (isinstance(data, dict) and all(data.get(k) == v for k, v in (expected or {}).items())
                and all(data.get(k) is not None for k in nonnull))
    except (OSError, http.client.HTTPException, ValueError):
        return False
    finally:
        conn.close()


def launch_failed(exit_code: int, log_path: Path) -> MlxAgentError:
    """Return the error for a server that exited before it was ready, with its last log lines.

    If the child reported a refusal of its own (its refusal line), that error is the answer.
    """
    tail = log_tail(log_path, 60)
    details = {"exit_code": exit_code, "log_path": str(log_path), "log_tail": tail[-20:]}
    reported = from_refusal_lines(tail, details)
    if reported is not None:
        return reported
    return LaunchFailed(f"the server exited with status {exit_code} before it was ready", details=details)


def wait_ready(child: subprocess.Popen[bytes], plan: dict[str, Any], log_path: Path,
               on_tick: Tick | None = None) -> None:
    """Return once the server is ready; raise ``launch_failed`` if it exits, ``readiness_timeout`` if slow."""
    start = time.monotonic()
    deadline = start + float(plan["ready_timeout_s"])
    while True:
        code = child.poll()
        if code is not None:
            raise launch_failed(code, log_path)
        if probe(plan["host"], plan["port"], plan["readiness"]):
            return
        now = time.monotonic()
        if on_tick is not None:
            tail = log_tail(log_path, 1)
            on_tick(now - start, tail[-1] if tail else "")
        if now >= deadline:
            raise ReadinessTimeout(
                f"the server was not ready within {plan['ready_timeout_s']} s",
                details={"ready_timeout_s": plan["ready_timeout_s"], "log_path": str(log_path),
                         "log_tail": log_tail(log_path)})
        time.sleep(POLL_SECONDS)
