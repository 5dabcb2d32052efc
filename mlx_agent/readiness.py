"""One readiness check, read the same way by the supervisor's probe (sync) and the front's (async).

A check is ``GET path`` (or ``POST path`` with the JSON body ``post``), answered with ``status``, and, when
``json`` or ``nonnull`` is given, a JSON object holding those fields (``nonnull``: present and not null).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.records.plan import ReadinessRecord


class Readiness:
    """A readiness check (a plain class: the supervisor imports it on every ``serve status``)."""

    __slots__ = ("expected", "nonnull", "path", "post", "status", "timeout")

    def __init__(self, record: ReadinessRecord, timeout: float = 2.0) -> None:
        self.path = record["path"]
        self.status = record.get("status", 200)
        self.expected: dict[str, Any] = record.get("json") or {}
        self.post = record.get("post")
        self.nonnull = list(record.get("nonnull") or [])
        self.timeout = float(record.get("timeout_s", timeout))

    @property
    def method(self) -> str:
        """Return the HTTP method of the check."""
        return "GET" if self.post is None else "POST"

    def body(self) -> bytes | None:
        """Return the request body: a tiny real request for servers whose /health answers before loading."""
        if self.post is None:
            return None
        import json

        return json.dumps(self.post).encode()

    def matches(self, status: int, body: bytes) -> bool:
        """Say whether an answer with this status and body means ready."""
        if status != self.status:
            return False
        if not self.expected and not self.nonnull:
            return True
        import json

        try:
            data = json.loads(body)
        except ValueError:
            return False
        return (
            isinstance(data, dict)
            and all(data.get(k) == v for k, v in self.expected.items())
            and all(data.get(k) is not None for k in self.nonnull)
        )
