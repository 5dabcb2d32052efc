"""Raw clients of a front for the tests of its connections: a TCP connection, whether the front closed it, its log."""

from __future__ import annotations

import json
import socket

from tests.gateway_support import Gateway


def connect(gateway: Gateway) -> socket.socket:
    """Open a raw TCP connection to the front."""
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
    return sock


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Say whether the front closes ``sock`` within ``seconds`` (reading EOF or a reset)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def request_statuses(gateway: Gateway) -> list[int]:
    """Return the status of every request line in the front's log, oldest first."""
    lines = [line.split("request ", 1)[1] for line in gateway.log_path.read_text().splitlines() if "request {" in line]
    return [json.loads(line)["status"] for line in lines]
