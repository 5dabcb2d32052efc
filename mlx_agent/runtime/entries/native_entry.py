"""Run a runtime's own server script from another environment so that only its front can use it.

``INTERPRETER native_entry.py SCRIPT [ARGS...]``: the front starts this file by path under the other
environment's interpreter, which has no mlx_agent installed, so it imports the standard library only (and
``mlx_agent/api_errors.py`` beside it, by path, for its one error answer: that module imports nothing else). It

* takes the worker's port from ``PORT_ENV`` and appends ``--port N`` to the script's argv in-process, so no
  port is in any process's command line;
* with ``KEY_ENV`` set, makes every request to an ``http.server`` handler (mlx_lm.server's) carry
  ``Authorization: Bearer KEY`` or get a 401 before the handler sees it: a loopback port is open to every
  local user, and mlx_lm's server checks no key of its own. A connection that has not proved the key is
  closed once ``PREAUTH_TIMEOUT_ENV`` seconds (the front's header deadline) have passed since it was
  accepted, however slowly it sends, and at most ``MAX_PREAUTH`` wait at once (a newcomer closes the one
  that has waited longest), so another user's idle connections hold neither threads nor the front's room;
* then runs ``SCRIPT`` as ``__main__`` (a pip console script is a Python file).

Both variables are taken out of the environment first, so nothing the server starts inherits them.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import socket
import sys
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import http.server
    from typing import Any

PORT_ENV = "MLX_AGENT_WORKER_PORT"
KEY_ENV = "MLX_AGENT_WORKER_KEY"
PREAUTH_TIMEOUT_ENV = "MLX_AGENT_WORKER_PREAUTH_TIMEOUT"  # seconds; absent: PREAUTH_TIMEOUT_S
PREAUTH_TIMEOUT_S = 30.0  # wire.HEADER_TIMEOUT_S, the front's own header deadline (this file imports no mlx_agent)
MAX_PREAUTH = 64  # connections that may wait to prove the key at once; the front needs one per request
# A refused request's body is read (up to this much) before the connection closes: closing a socket with
# unread data sends a reset, which can destroy the 401 before the client reads it.
DRAIN_LIMIT = 1 << 16


class DeadlineReader(io.RawIOBase):
    """A socket's reading end whose receives all end by one deadline, however slowly the peer sends.

    A socket timeout bounds each receive alone, so a peer sending a byte just inside it holds a reader for
    ever; here each receive waits only for what is left of ``deadline`` and then raises ``TimeoutError``
    (which ``http.server`` answers by closing the connection). ``lift`` restores the socket's own timeout.
    """

    def __init__(self, sock: socket.socket, seconds: float | None) -> None:
        super().__init__()
        self.sock = sock
        self.lifted_timeout = sock.gettimeout()
        self.deadline: float | None = None
        if seconds is not None:
            self.start(seconds)

    def readable(self) -> bool:
        """Say that this end reads."""
        return True

    def start(self, seconds: float) -> None:
        """Let every receive from now on end within ``seconds`` in all."""
        self.deadline = time.monotonic() + seconds

    def lift(self, timeout: float | None = None) -> None:
        """End the deadline: receives wait as the socket's own timeout says (or ``timeout``)."""
        self.deadline = None
        self.sock.settimeout(timeout if timeout is not None else self.lifted_timeout)

    def readinto(self, buffer: Any) -> int:
        """Receive into ``buffer``, waiting no later than the deadline."""
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the read deadline has passed")
            self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class PreAuth:
    """The connections still to prove the key: each under a deadline, the longest waiting closed when full."""

    def __init__(self, seconds: float, limit: int = MAX_PREAUTH) -> None:
        self.seconds = seconds
        self.limit = limit
        self.lock = threading.Lock()
        self.waiting: dict[int, tuple[float, socket.socket]] = {}  # id(handler) -> (accepted at, socket)

    def enter(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        """Read ``handler``'s request under the deadline; close the longest-waiting connection if full."""
        handler.rfile.close()  # the stdlib's own reader, replaced before it read anything
        handler.rfile = io.BufferedReader(DeadlineReader(handler.connection, self.seconds))
        with self.lock:
            if len(self.waiting) >= self.limit:
                oldest = min(self.waiting, key=lambda k: self.waiting[k][0])
                _, sock = self.waiting.pop(oldest)
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # its reader sees the end and its thread ends
            self.waiting[id(handler)] = (time.monotonic(), handler.connection)

    def leave(self, handler: http.server.BaseHTTPRequestHandler, proved: bool) -> None:
        """Forget ``handler``; one that proved the key reads on without the deadline."""
        with self.lock:
            self.waiting.pop(id(handler), None)
        raw = getattr(handler.rfile, "raw", None)
        if proved and isinstance(raw, DeadlineReader):
            raw.lift()


def _api_errors() -> Any:
    """Return ``mlx_agent/api_errors.py`` (stdlib only), loaded by path: no ``mlx_agent`` is installed here."""
    import importlib.util

    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location("mlx_agent_api_errors", os.path.join(package, "api_errors.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_key(key: str, preauth_seconds: float = PREAUTH_TIMEOUT_S) -> None:
    """Make every ``http.server`` handler answer 401 to a request without ``Authorization: Bearer key``.

    Until the key is proved, the connection reads under ``PreAuth``'s deadline and bound.
    """
    import hmac
    import http.server  # here: an mlx-vlm worker (FastAPI, its own key check) never needs it
    import json
    import socketserver

    original = http.server.BaseHTTPRequestHandler.parse_request
    original_finish = http.server.BaseHTTPRequestHandler.finish
    preauth = PreAuth(preauth_seconds)
    expected = f"Bearer {key}".encode()
    api = _api_errors()
    body = json.dumps(
        api.error_body(api.Family.OPENAI, api.Code.INVALID_API_KEY, "this worker answers only its mlx-agent front")
    ).encode()

    def parse_request(self: http.server.BaseHTTPRequestHandler) -> bool:
        if not original(self):
            return False  # the stdlib has already answered a malformed request
        given = (self.headers.get("Authorization") or "").encode("latin-1", "replace")
        if hmac.compare_digest(given, expected):
            preauth.leave(self, proved=True)
            return True
        preauth.leave(self, proved=False)
        length = self.headers.get("Content-Length") or ""
        if length.isdigit() and int(length) <= DRAIN_LIMIT:
            self.rfile.read(int(length))
        self.close_connection = True
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("WWW-Authenticate", "Bearer")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        return False  # handle_one_request stops here: no do_* method runs

    def setup(self: http.server.BaseHTTPRequestHandler) -> None:
        socketserver.StreamRequestHandler.setup(self)
        preauth.enter(self)

    def finish(self: http.server.BaseHTTPRequestHandler) -> None:
        preauth.leave(self, proved=False)
        original_finish(self)

    http.server.BaseHTTPRequestHandler.parse_request = parse_request  # type: ignore[method-assign]
    http.server.BaseHTTPRequestHandler.setup = setup  # type: ignore[method-assign,assignment]
    http.server.BaseHTTPRequestHandler.finish = finish  # type: ignore[method-assign,assignment]


def main(argv: list[str]) -> None:
    """Run the script ``argv[1]`` with ``argv[2:]``, its port taken from the environment, behind the key."""
    if len(argv) < 2:
        sys.exit(f"usage: {argv[0]} SCRIPT [ARGS...] (with {PORT_ENV} set)")
    script, args = argv[1], argv[2:]
    port = os.environ.pop(PORT_ENV, "")
    key = os.environ.pop(KEY_ENV, None)
    preauth = os.environ.pop(PREAUTH_TIMEOUT_ENV, "")
    if not port.isdigit():
        sys.exit(f"{argv[0]}: {PORT_ENV} must name the worker's port")
    try:
        seconds = float(preauth) if preauth else PREAUTH_TIMEOUT_S
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        sys.exit(f"{argv[0]}: {PREAUTH_TIMEOUT_ENV} must be a number of seconds above 0")
    if key is not None:
        if not key:
            sys.exit(f"{argv[0]}: {KEY_ENV} is empty")  # fail closed rather than serve without a key
        require_key(key, seconds)
    sys.argv = [script, *args, "--port", port]
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] == here:
        # Python put this file's directory (mlx_agent/runtime/entries) first; the script would have its own there.
        sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
