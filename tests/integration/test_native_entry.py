"""The native entry under an interpreter that cannot import mlx_agent: its 401 is built by api_errors, by path."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from mlx_agent.api_errors import Code, Family, error_body
from mlx_agent.runtime.entries import native_entry
from tests.conftest import free_port

# A runtime's own server script as native_entry runs it: an http.server on the --port it is given.
SERVER = """
import http.server, importlib.util, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
print("mlx_agent importable:", importlib.util.find_spec("mlx_agent") is not None, flush=True)

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def get(port: int, headers: dict[str, str]) -> tuple[int, bytes]:
    """Return the status and body of ``GET /health``, retrying until the server listens."""
    deadline = time.monotonic() + 30
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/health", headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.read()
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        finally:
            conn.close()


def test_a_request_without_the_key_gets_the_api_errors_401(tmp_path: Path) -> None:
    """With no site-packages (no mlx_agent), the entry still answers 401 invalid_api_key in the OpenAI shape."""
    script = tmp_path / "server.py"
    script.write_text(SERVER, encoding="utf-8")
    port = free_port()
    env = {**os.environ, native_entry.PORT_ENV: str(port), native_entry.KEY_ENV: "k" * 32}
    argv = [sys.executable, "-S", "-I", native_entry.__file__, str(script)]  # -S -I: stdlib only, as elsewhere
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        status, body = get(port, {})
        assert status == 401
        expected = error_body(Family.OPENAI, Code.INVALID_API_KEY, "this worker answers only its mlx-agent front")
        assert json.loads(body) == expected and expected["error"]["type"] == "authentication_error"
        assert get(port, {"Authorization": "Bearer " + "k" * 32}) == (200, b"ok")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert "mlx_agent importable: False" in out, out + err
