"""OpenAI-style JSON error responses, the one shape every refusal of the gateway takes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web


def error_body(message: str, *, type_: str, code: str, param: str | None = None,
               **extra: Any) -> dict[str, Any]:
    """Return ``{"error": {"message", "type", "param", "code", ...extra}}``."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code, **extra}}


def error_response(status: int, message: str, *, code: str, type_: str = "invalid_request_error",
                   param: str | None = None, headers: Mapping[str, str] | None = None,
                   **extra: Any) -> web.Response:
    """Return an error response with an OpenAI-style body."""
    return json_response(error_body(message, type_=type_, code=code, param=param, **extra), status=status,
                         headers=headers)


def json_response(data: object, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """Return a compact JSON response."""
    return web.Response(body=json.dumps(data, separators=(",", ":")).encode(), status=status,
                        content_type="application/json", headers=headers)


class RequestRefused(Exception):
    """A request the gateway answers with an error itself; ``response()`` renders it."""

    def __init__(self, status: int, message: str, *, code: str, type_: str = "invalid_request_error",
                 param: str | None = None, headers: Mapping[str, str] | None = None,
                 extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type_ = type_
        self.param = param
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        """Return the error body."""
        return error_body(self.message, type_=self.type_, code=self.code, param=self.param, **self.extra)

    def response(self) -> web.Response:
        """Return the error as an HTTP response."""
        return json_response(self.body(), status=self.status, headers=self.headers)
