"""The gateway's front door: Host and Origin checks, the body cap, and who may call what.

* Every request must name the gateway by a loopback ``Host`` (``127.0.0.1:PORT``, ``localhost:PORT`` or
  ``[::1]:PORT``), else 403: a page on another site that rebinds its DNS name to 127.0.0.1 still sends its own
  name. An ``Origin``, when sent, must be a loopback origin (any port, http or https), else 403.
* CORS: a loopback ``Origin`` is echoed back with ``Vary: Origin``; ``*`` is never sent.
* Bodies larger than ``max_body_bytes`` get 413 (a path in ``body_caps``, the audio uploads, has its own cap).
* Every check above and the keys below use the headers alone: a refused request's body is never read
  (``connections.track_requests`` closes the connection after the answer). A body cut off for arriving too
  slowly (``connections.BodyTimeout``) is 408 ``body_timeout``; a client that hangs up mid-body is not an error
  of ours, so it is left to ``observe``, which logs 499.
* ``/mlx-agent/...`` (control: status, unload, policy) and ``CONTROL_PATHS`` (``/v1/cache/reset``) need
  ``Authorization: Bearer <control token>``; ``OPERATOR_PATHS`` (``/v1/cache/stats``) take it instead of a key.
* Each request names its caller (its API key's id, or none) for the tenant of mlx-vlm's prefix cache
  (``cache_tenant``).
* ``/v1/...``, Ollama's ``/api/...`` and ``/metrics`` need an API key, as ``Authorization: Bearer KEY`` or
  ``x-api-key: KEY``, when the config names an API key file; ``/health`` is always open and tells only liveness
  and the model state.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from mlx_agent.api_errors import Code
from mlx_agent.gateway.cache_tenant import set_caller
from mlx_agent.gateway.door.connections import BodyTimeout, Handler
from mlx_agent.gateway.door.http_errors import error_response
from mlx_agent.wire import CONTROL_PREFIX, front_proof

MODEL_PREFIX = "/v1/"
OLLAMA_PREFIX = "/api/"  # the Ollama API (gateway/ollama/): the same keys as /v1/
ACCEPTED_ENCODINGS = ("identity",)  # no client compresses its requests; a compressed body is 415, not decoded
METRICS_PATH = "/metrics"  # model names and traffic: behind the keys, like the model API
# Model API paths that act for every client (a cache reset drops everyone's prefixes): the control token's.
CONTROL_PATHS = frozenset({"/v1/cache/reset"})
# Paths any API key may read, where the control token shows more (the prefix cache's figures across keys).
OPERATOR_PATHS = frozenset({"/v1/cache/stats"})
OPERATOR = web.RequestKey("mlx_agent_operator", bool)  # the request came with the control token
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
API_KEY_ID = web.RequestKey("mlx_agent_api_key_id", str)  # the non-secret id of the request's API key
log = logging.getLogger("mlx_agent.gateway")


def allowed_hosts(port: int) -> frozenset[str]:
    """Return the ``Host`` header values that name this gateway."""
    hosts = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    if port == 80:
        hosts |= {"127.0.0.1", "localhost", "[::1]"}
    return frozenset(hosts)


def loopback_origin(origin: str) -> bool:
    """Say whether an ``Origin`` header names a page served from this machine's loopback."""
    try:
        parts = urlsplit(origin)
        host = parts.hostname
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host in LOOPBACK_NAMES and not parts.path.strip("/")


def _bearer(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def key_id(key: str) -> str:
    """Return a stable, non-secret name for an API key (what per-key accounting is keyed by)."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class Guard:
    """The middleware's settings: port, body cap, the control token, the API keys (or None), the methods served."""

    def __init__(
        self,
        port: int,
        max_body_bytes: int,
        control_token: str,
        api_keys: list[str] | None,
        methods: Iterable[str],
        body_caps: Mapping[str, int] | None = None,
    ) -> None:
        self.hosts = allowed_hosts(port)
        # what a preflight allows: the route table's methods (app.py passes them), so a new one is never left out
        self.preflight_methods = ", ".join([*sorted(set(methods) - {"OPTIONS"}), "OPTIONS"])
        self.max_body_bytes = max_body_bytes
        self.body_caps = dict(body_caps or {})  # paths whose bodies may be larger (the audio uploads)
        self._control_token = control_token.encode()
        self._api_keys = [k.encode() for k in api_keys] if api_keys else None

    def proof(self, challenge: str) -> str:
        """Return this front's proof for a readiness challenge (``wire.front_proof``)."""
        return front_proof(self._control_token.decode(), challenge)

    def control_ok(self, request: web.Request) -> bool:
        """Say whether the request carries the control token."""
        token = _bearer(request)
        return token is not None and hmac.compare_digest(token.encode(), self._control_token)

    def api_key(self, request: web.Request) -> tuple[str | None, bool]:
        """Return the matching API key the request presents (or None), and whether it presented any."""
        assert self._api_keys is not None
        presented = [v for v in (_bearer(request), request.headers.get("x-api-key")) if v]
        found = None
        for value in presented:
            candidate = value.encode()
            for key in self._api_keys:  # compare against every key: no early exit to time
                if hmac.compare_digest(candidate, key):
                    found = value
        return found, bool(presented)

    def middleware(self) -> Middleware:
        """Return the aiohttp middleware that applies this guard."""

        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await self.check(request, handler)

        return guard

    async def check(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse what the module docstring lists; then run the handler, turning HTTP errors into JSON."""
        host = request.headers.get("Host", "").lower()
        if host not in self.hosts:
            return error_response(Code.FORBIDDEN_HOST, "the Host header must name this gateway on loopback")
        origin = request.headers.get("Origin")
        if origin is not None and not loopback_origin(origin):
            return error_response(Code.FORBIDDEN_ORIGIN, "cross-origin requests are accepted from loopback pages only")
        if request.method == "OPTIONS" and origin is not None:
            return web.Response(
                status=204,
                headers={
                    "Access-Control-Allow-Methods": self.preflight_methods,
                    "Access-Control-Allow-Headers": "Authorization, Content-Type, x-api-key, anthropic-version, "
                    "anthropic-beta, openai-beta",
                    "Access-Control-Max-Age": "600",
                },
            )
        cap = self.body_caps.get(request.path, self.max_body_bytes)
        if request.content_length is not None and request.content_length > cap:
            return _too_large(cap)
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ACCEPTED_ENCODINGS:
            return error_response(
                Code.UNSUPPORTED_CONTENT_ENCODING,
                f"request bodies must not be compressed (Content-Encoding: {encoding})",
                param="Content-Encoding",
            )
        path = request.path
        set_caller(None)  # a keep-alive connection's requests share one task: each names its own caller
        if path.startswith(CONTROL_PREFIX) or path in CONTROL_PATHS:
            if not self.control_ok(request):
                return error_response(Code.UNAUTHORIZED, "control endpoints need the gateway's control token")
        elif path in OPERATOR_PATHS and self.control_ok(request):
            request[OPERATOR] = True  # the control token may read what key holders may not (cache_stats.py)
        elif (path.startswith((MODEL_PREFIX, OLLAMA_PREFIX)) or path == METRICS_PATH) and self._api_keys is not None:
            key, presented = self.api_key(request)
            if key is None:
                message = (
                    "invalid API key"
                    if presented
                    else "an API key is required (Authorization: Bearer KEY or x-api-key)"
                )
                return error_response(Code.INVALID_API_KEY, message, headers={"WWW-Authenticate": "Bearer"})
            request[API_KEY_ID] = key_id(key)
            set_caller(request[API_KEY_ID])
        try:
            return await handler(request)
        except BodyTimeout as exc:
            return error_response(Code.BODY_TIMEOUT, f"{exc}; send the whole body at once")
        except ConnectionResetError:  # the client hung up (mid-body): no answer to give, and not a bug
            raise
        except web.HTTPRequestEntityTooLarge:
            return _too_large(self.max_body_bytes)
        except web.HTTPMethodNotAllowed as exc:
            allowed = ", ".join(sorted(exc.allowed_methods))
            return error_response(
                Code.METHOD_NOT_ALLOWED,
                f"{request.method} is not allowed on {path}; use {allowed}",
                headers={"Allow": allowed},
            )
        except web.HTTPNotFound:
            return error_response(Code.NOT_FOUND, f"no such endpoint: {path}")
        except web.HTTPException as exc:  # aiohttp's own refusals (a body it cannot decode, ...), as JSON
            if exc.status < 400:
                raise
            return error_response(Code.BAD_REQUEST, exc.text or exc.reason, status=exc.status)
        except Exception:  # a bug: answered as JSON, logged with its traceback
            log.exception("unexpected error answering %s %s", request.method, path)
            return error_response(Code.INTERNAL_ERROR, "the front failed to answer this request")


def _too_large(limit: int) -> web.Response:
    return error_response(Code.BODY_TOO_LARGE, f"the request body exceeds {limit} bytes")


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Echo a (checked, loopback) ``Origin``; never ``*``."""
    origin = request.headers.get("Origin")
    if origin is not None and loopback_origin(origin):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
