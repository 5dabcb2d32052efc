"""The front's body cap and body deadline around an ASGI app (the mlx-vlm worker's FastAPI under uvicorn).

The mlx_lm worker's handler reads its socket itself (``socket_limits``); uvicorn hands an app its body in
pieces as they arrive and bounds neither their total nor how long they take. ``BodyLimits`` reads the whole
body first, within ``max_body_bytes`` (by Content-Length before anything is read, and by what arrives) and
``body_timeout``, then gives the app the body it read: over the cap is 413 ``body_too_large``, too slow is
408 ``body_timeout``, each an OpenAI error object. What a refused client still sends is read and dropped for
``REFUSAL_WRITE_S`` first, so it reads its answer rather than a broken pipe. uvicorn has no deadline on the
headers themselves.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mlx_agent.api_errors import Code, Family, error_body
from mlx_agent.runtime.serving.socket_limits import REFUSAL_WRITE_S, SocketLimits

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]


class BodyLimits:
    """ASGI middleware: the request body within the cap and the deadline, or the refusal (module docstring)."""

    def __init__(self, app: App, limits: SocketLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        """Serve one connection's request: lifespan and websockets pass through untouched."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.limits.max_body_bytes
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.strip().isdigit() or int(length) > cap):
            if length.strip().isdigit():
                await drain(receive)
                await refuse(send, Code.BODY_TOO_LARGE, f"The request body is {int(length)} bytes; at most {cap}.")
            else:
                await refuse(send, Code.INVALID_JSON, "Content-Length is not a number.")
            return
        body = await self._read_body(receive, send)
        if body is None:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _read_body(self, receive: Receive, send: Send) -> bytes | None:
        """Return the whole body, or None once a refusal (or nothing, for a client gone) has been sent."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.body_timeout
        parts: list[bytes] = []
        size = 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.0))
            except TimeoutError:
                await refuse(send, Code.BODY_TIMEOUT, "The request body did not arrive in time; send it at once.")
                return None
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_body_bytes:
                if message.get("more_body", False):
                    await drain(receive)
                await refuse(send, Code.BODY_TOO_LARGE, f"The request body exceeds {self.limits.max_body_bytes} bytes.")
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)


async def read_whole(receive: Receive) -> tuple[list[Message], bytes]:
    """Return a request's messages and its body (capped by ``BodyLimits`` before it), for a check to read first."""
    messages: list[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            break
    return messages, b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """Return a ``receive`` that gives the app ``messages`` (already read) first, then what comes after them."""

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return replay


async def drain(receive: Receive) -> None:
    """Read and drop what the client still sends of its body, for ``REFUSAL_WRITE_S`` at most."""
    loop = asyncio.get_running_loop()
    end = loop.time() + REFUSAL_WRITE_S
    while (left := end - loop.time()) > 0:
        try:
            message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            return
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def refuse(send: Send, code: Code, message: str) -> None:
    """Answer ``code`` as an OpenAI error object and close the connection."""
    body = json.dumps(error_body(Family.OPENAI, code, message, status=code.status)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": code.status, "headers": [*headers, (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
