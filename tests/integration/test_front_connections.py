"""The front's connection limits: a slow request's headers, idle keep-alive connections, how many at once."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from tests.gateway_support import Gateway, running_gateway


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


def test_headers_sent_a_byte_at_a_time_are_cut_off(tmp_path: Path) -> None:
    """A client that has not finished its request's headers within header_timeout is disconnected."""
    with running_gateway(tmp_path, header_timeout=1.0) as gateway:
        slow = connect(gateway)
        for byte in b"GET /health HTTP/1.1\r\nHost: 127.0.0.1":
            try:
                slow.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
        assert closed_within(slow, 5)
        assert gateway.request("GET", "/health").status == 200  # others are served all along


def test_an_idle_keep_alive_connection_is_closed(tmp_path: Path) -> None:
    """After a complete request, a connection left idle past keepalive_timeout is closed by the front."""
    with running_gateway(tmp_path, keepalive_timeout=1.0) as gateway:
        idle = connect(gateway)
        idle.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n\r\n".encode())
        idle.settimeout(5)
        assert b"200" in idle.recv(4096).split(b"\r\n")[0]
        assert closed_within(idle, 5)


def test_a_client_that_hangs_up_ends_its_non_streamed_request(tmp_path: Path) -> None:
    """A non-streaming client that disconnects cancels its request at once: the front's worker call is closed."""
    with running_gateway(tmp_path) as gateway:
        assert gateway.chat().status == 200  # loaded
        sock = connect(gateway)
        body = json.dumps({"model": "org/tiny", "messages": [{"role": "user", "content": "hi"}], "x_sleep": 30})
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        deadline = time.monotonic() + 10
        while gateway.status()["open_requests"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sock.close()
        while gateway.status()["open_requests"] != 0:  # long before the worker's 30 s answer
            assert time.monotonic() < deadline, "the hung-up request stayed open"
            time.sleep(0.05)
        assert gateway.control("POST", "unload").status == 200  # nothing open blocks an unload


def test_connections_past_the_limit_are_refused_and_the_open_ones_served(tmp_path: Path) -> None:
    """With max_connections 3, a fourth connection is closed at once; the three open ones still get answers."""
    with running_gateway(tmp_path, max_connections=3) as gateway:
        held = [connect(gateway) for _ in range(3)]
        time.sleep(0.3)
        extra = connect(gateway)
        assert closed_within(extra, 5)
        for sock in held:
            sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n\r\n".encode())
            sock.settimeout(5)
            assert b" 200 " in sock.recv(4096).split(b"\r\n")[0]
            sock.close()
        time.sleep(0.3)
        assert gateway.request("GET", "/health").status == 200  # room again once they closed
