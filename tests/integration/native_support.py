"""The stand-in runtime server the native entry's tests run it over (no tests here), and a health request to it.

A runtime's own server script as ``native_entry`` runs it: a threading ``http.server`` (what mlx_lm.server is) on
the ``--port`` it is given, answering ``GET`` with ``ok``; it first says whether it can import mlx_agent.
"""

from __future__ import annotations

import http.client
import time

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

http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
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
