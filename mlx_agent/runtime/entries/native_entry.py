"""Run a runtime's own server script from another environment so that only its front can use it.

``INTERPRETER native_entry.py SCRIPT [ARGS...]``: the front starts this file by path under the other
environment's interpreter, which has no mlx_agent installed, so it imports the standard library only (and
``mlx_agent/api_errors.py`` beside it, by path, for its one error answer: that module imports nothing else). It

* takes the worker's port from ``PORT_ENV`` and appends ``--port N`` to the script's argv in-process, so no
  port is in any process's command line;
* with ``KEY_ENV`` set, makes every request to an ``http.server`` handler (mlx_lm.server's) carry
  ``Authorization: Bearer KEY`` or get a 401 before the handler sees it: a loopback port is open to every
  local user, and mlx_lm's server checks no key of its own;
* then runs ``SCRIPT`` as ``__main__`` (a pip console script is a Python file).

Both variables are taken out of the environment first, so nothing the server starts inherits them.
"""

from __future__ import annotations

import os
import runpy
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import http.server
    from typing import Any

PORT_ENV = "MLX_AGENT_WORKER_PORT"
KEY_ENV = "MLX_AGENT_WORKER_KEY"
# A refused request's body is read (up to this much) before the connection closes: closing a socket with
# unread data sends a reset, which can destroy the 401 before the client reads it.
DRAIN_LIMIT = 1 << 16


def _api_errors() -> Any:
    """Return ``mlx_agent/api_errors.py`` (stdlib only), loaded by path: no ``mlx_agent`` is installed here."""
    import importlib.util

    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location("mlx_agent_api_errors", os.path.join(package, "api_errors.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_key(key: str) -> None:
    """Make every ``http.server`` handler answer 401 to a request without ``Authorization: Bearer key``."""
    import hmac
    import http.server  # here: an mlx-vlm worker (FastAPI, its own key check) never needs it
    import json

    original = http.server.BaseHTTPRequestHandler.parse_request
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
            return True
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

    http.server.BaseHTTPRequestHandler.parse_request = parse_request  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    """Run the script ``argv[1]`` with ``argv[2:]``, its port taken from the environment, behind the key."""
    if len(argv) < 2:
        sys.exit(f"usage: {argv[0]} SCRIPT [ARGS...] (with {PORT_ENV} set)")
    script, args = argv[1], argv[2:]
    port = os.environ.pop(PORT_ENV, "")
    key = os.environ.pop(KEY_ENV, None)
    if not port.isdigit():
        sys.exit(f"{argv[0]}: {PORT_ENV} must name the worker's port")
    if key is not None:
        if not key:
            sys.exit(f"{argv[0]}: {KEY_ENV} is empty")  # fail closed rather than serve without a key
        require_key(key)
    sys.argv = [script, *args, "--port", port]
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] == here:
        # Python put this file's directory (mlx_agent/runtime/entries) first; the script would have its own there.
        sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
