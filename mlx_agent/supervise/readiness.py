"""Waiting for a launched server to answer, while watching that it is still alive."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mlx_agent.errors import LaunchFailed, MlxAgentError, ReadinessTimeout, from_refusal_lines
from mlx_agent.files import log_tail
from mlx_agent.readiness import Readiness
from mlx_agent.wire import CHALLENGE_PARAM, front_proof

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess

    from mlx_agent.records.plan import ReadinessRecord, ServePlan
    from mlx_agent.records.receipt import ServeReceipt

Tick = Callable[[float, str], None]
POLL_SECONDS = 0.25
FRONT_GRACE_S = 10.0


def probe(host: str, port: int, record: ReadinessRecord, timeout: float = 1.0, token: str | None = None) -> bool:
    """Say whether the server answers its readiness check as the plan expects.

    With ``token`` (a front's control token) the answer must also carry the proof of a fresh challenge
    (``wire.front_proof``): only the front the receipt launched can give it, not a process squatting the port.
    """
    import http.client  # lazily: it drags in ssl and email, and most status calls probe nothing

    check = Readiness(record, timeout)
    conn = http.client.HTTPConnection(host, port, timeout=check.timeout)
    path, challenge = check.path, None
    if token is not None:
        import secrets

        challenge = secrets.token_hex(16)
        path += ("&" if "?" in path else "?") + f"{CHALLENGE_PARAM}={challenge}"
    try:
        body = check.body()
        conn.request(
            check.method, path, body=body, headers={"Content-Type": "application/json"} if body is not None else {}
        )
        resp = conn.getresponse()
        raw = resp.read()
        if not check.matches(resp.status, raw):
            return False
        if token is None or challenge is None:
            return True
        import hmac
        import json

        doc = json.loads(raw)
        proof = doc.get("proof") if isinstance(doc, dict) else None
        return isinstance(proof, str) and hmac.compare_digest(proof, front_proof(token, challenge))
    except (OSError, http.client.HTTPException, ValueError):
        return False
    finally:
        conn.close()


def read_token(path: str) -> str:
    """Return a front's control token from its private file (never through a link, never another user's)."""
    import os

    from mlx_agent.files import open_private

    with os.fdopen(open_private(Path(path), os.O_RDONLY), "rb") as fh:
        return fh.read().decode("utf-8", "replace").strip()


# A front answers /health 503 with this status while a model's worker is wedged (gateway/models/stall.py):
# still the front.
FRONT_HEALTH: tuple[ReadinessRecord, ...] = (
    {"path": "/health", "status": 200},
    {"path": "/health", "status": 503, "json": {"status": "wedged"}},
)


def front_health(host: str, port: int, token: str | None = None) -> bool:
    """Say whether a front answers its /health (200, or 503 while a worker is wedged), with the proof if ``token``."""
    return any(probe(host, port, record, 0.5, token) for record in FRONT_HEALTH)


def front_answers(receipt: ServeReceipt) -> bool:
    """Say whether the port's answer proves it comes from the front this receipt launched."""
    try:
        token = read_token(receipt["plan"]["front"]["token_path"])
    except (OSError, MlxAgentError):
        return False
    return front_health(receipt.get("host", "127.0.0.1"), int(receipt["port"]), token)


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


def wait_ready(
    child: subprocess.Popen[bytes],
    plan: ServePlan,
    log_path: Path,
    on_tick: Tick | None = None,
    tick_log: Path | None = None,
) -> None:
    """Return once the server is ready; raise ``launch_failed`` if it exits, ``readiness_timeout`` if slow.

    The front enforces the plan's ``ready_timeout`` on its own loads and exits with a refusal line; waiting a
    little longer here lets its own, more precise error arrive. ``tick_log`` is the log whose last line the
    spinner shows (the worker's, while an eager front loads it).
    """
    start = time.monotonic()
    limit = float(plan["ready_timeout"]) + FRONT_GRACE_S
    deadline = start + limit
    token = read_token(plan["front"]["token_path"])  # the answer must prove it is the front just launched
    while True:
        code = child.poll()
        if code is not None:
            raise launch_failed(code, log_path)
        if probe(plan["host"], plan["port"], plan["readiness"], token=token):
            return
        now = time.monotonic()
        if on_tick is not None:
            tail = log_tail(tick_log or log_path, 1)
            on_tick(now - start, tail[-1] if tail else "")
        if now >= deadline:
            raise ReadinessTimeout(
                f"the server was not ready within {limit:g} s",
                details={
                    "ready_timeout": plan["ready_timeout"],
                    "log_path": str(log_path),
                    "log_tail": log_tail(log_path),
                },
            )
        time.sleep(POLL_SECONDS)
