"""OpenAI-style JSON error answers, the one shape every refusal of the front takes (Anthropic's is derived).

A handler raises ``RequestRefused`` (``mlx_agent.errors``) or returns ``error_response``; both end up as
``{"error": {"message", "type", "param", "code", ...}}`` with the HTTP status. Non-retryable client errors
carry ``x-should-retry: false``, which the official SDKs and agents honour instead of retrying.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from mlx_agent.errors import RequestRefused

# Statuses a client may retry: a timeout, a conflict, rate limits, and the server's own trouble.
RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504})


def error_body(message: str, *, type_: str, code: str, param: str | None = None, **extra: Any) -> dict[str, Any]:
    """Return ``{"error": {"message", "type", "param", "code", ...extra}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code, **extra}}


def retry_headers(status: int, headers: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return ``headers`` plus ``x-should-retry: false`` for a status no retry can change."""
    out = dict(headers or {})
    if status >= 400 and status not in RETRYABLE:
        out.setdefault("x-should-retry", "false")
    return out


def error_response(
    status: int,
    message: str,
    *,
    code: str,
    type_: str = "invalid_request_error",
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> web.Response:
    """Return an error response with an OpenAI-style body."""
    return json_response(
        error_body(message, type_=type_, code=code, param=param, **extra),
        status=status,
        headers=retry_headers(status, headers),
    )


def refusal_response(refusal: RequestRefused) -> web.Response:
    """Return a ``RequestRefused`` as its HTTP answer."""
    return json_response(refusal.body(), status=refusal.status, headers=retry_headers(refusal.status, refusal.headers))


def json_response(data: object, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """Return a compact JSON response."""
    return web.Response(
        body=json.dumps(data, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )
