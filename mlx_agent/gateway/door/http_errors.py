"""The front's error answers: every refusal as JSON in its API family's shape, with retry advice.

A handler raises ``RequestRefused`` (``mlx_agent.errors``; ``refused`` makes one from its ``Code``) or returns
``error_response``; both end up as the body ``api_errors.error_body`` builds, with the HTTP status.
Non-retryable client errors carry ``x-should-retry: false``, which the official SDKs and agents honour
instead of retrying.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.typedefs import Middleware

from mlx_agent.api_errors import Code, Family, anthropic_body, error_body, ollama_body
from mlx_agent.bodies import Body, check
from mlx_agent.errors import BodyInvalid, RequestRefused

B = TypeVar("B", bound=Body)
# Statuses a client may retry: a timeout, a conflict, rate limits, and the server's own trouble.
RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504})
# The headers an error keeps when it is given another family's shape.
KEPT_HEADERS = ("Retry-After", "WWW-Authenticate", "x-should-retry", "Allow")


def parse(declaration: type[B], doc: dict[str, Any]) -> B:
    """Return ``doc`` parsed by ``declaration``; a refusal is the 400 naming the field (``bodies.check``)."""
    try:
        return check(declaration, doc)
    except BodyInvalid as error:
        raise RequestRefused(400, error.message, code=error.code, param=error.param) from None


def refused(
    code: Code,
    message: str,
    *,
    param: str | None = None,
    status: int | None = None,
    headers: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> RequestRefused:
    """Return the refusal of ``code``, with the code's own status (unless ``status``) and type."""
    return RequestRefused(
        status or code.status, message, code=code, type_=code.kind, param=param, headers=headers, extra=extra
    )


def retry_headers(status: int, headers: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return ``headers`` plus ``x-should-retry: false`` for a status no retry can change."""
    out = dict(headers or {})
    if status >= 400 and status not in RETRYABLE:
        out.setdefault("x-should-retry", "false")
    return out


def error_response(
    code: Code,
    message: str,
    *,
    status: int | None = None,
    type_: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> web.Response:
    """Return an error response with an OpenAI-style body (the status and type are the code's by default)."""
    status = status or code.status
    return json_response(
        error_body(Family.OPENAI, code, message, status=status, type_=type_, param=param, **extra),
        status=status,
        headers=retry_headers(status, headers),
    )


def refusal_response(refusal: RequestRefused, family: Family = Family.OPENAI) -> web.Response:
    """Return a ``RequestRefused`` as its HTTP answer in ``family``'s shape."""
    body = refusal.body()
    if family is Family.ANTHROPIC:
        body = anthropic_body(refusal.status, body)
    elif family is Family.OLLAMA:
        body = ollama_body(refusal.status, body)
    return json_response(body, status=refusal.status, headers=retry_headers(refusal.status, refusal.headers))


def json_response(data: object, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """Return a compact JSON response."""
    return web.Response(
        body=json.dumps(data, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def family_errors(
    prefix: str, ours: Callable[[dict[str, Any]], bool], shape: Callable[[int, dict[str, Any]], dict[str, Any]]
) -> Middleware:
    """Return a middleware that gives each JSON error under ``prefix`` in our shape (``ours``) ``shape``'s.

    It runs outside the front door's checks, so their refusals (key, Host, limits) take the family's shape too.
    """

    @web.middleware
    async def middleware(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        response = await handler(request)
        if (
            not request.path.startswith(prefix)
            or response.status < 400
            or not isinstance(response, web.Response)
            or response.content_type != "application/json"
            or not isinstance(response.body, bytes)
        ):
            return response
        try:
            doc: Any = json.loads(response.body)
        except ValueError:
            return response
        if not isinstance(doc, dict) or not ours(doc):
            return response
        headers = {name: response.headers[name] for name in KEPT_HEADERS if name in response.headers}
        return json_response(shape(response.status, doc), status=response.status, headers=headers)

    return middleware
