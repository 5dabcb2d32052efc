"""Whole raw HTTP requests that ask the server to close the connection after its answer (``Connection: close``).

A test that reads an answer to the end of its connection (``worker_socket_support.read_answer``) sends these: an
uvicorn worker (mlx-vlm's) otherwise keeps the connection open until its keep-alive runs out, seconds later.
"""

from __future__ import annotations

import json
from typing import Any


def closing_post(body: Any, path: str) -> bytes:
    """Return a POST of ``body`` as JSON to ``path``, with its Content-Length and ``Connection: close``."""
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: worker\r\nConnection: close\r\nContent-Type: application/json\r\n"
    return head.encode() + f"Content-Length: {len(data)}\r\n\r\n".encode() + data
