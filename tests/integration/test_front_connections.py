"""The front's connection limits: a slow request's headers, idle keep-alive connections, how many at once."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlx_agent.gateway.sse import HIGH_WATER
from tests.conditions import accepted_connections, unread_bytes, wait_until
from tests.front_clients import closed_within, connect, request_statuses
from tests.gateway_support import Gateway, running_gateway
from tests.standin_fronts import settled


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


def test_a_client_that_hangs_up_ends_its_non_streamed_request(standin: Gateway) -> None:
    """A non-streaming client that disconnects cancels its request at once: the front's worker call is closed."""
    gateway = standin  # the shared front: it ends unloaded, as each test finds it
    assert gateway.chat().status == 200  # loaded
    sock = connect(gateway)
    body = json.dumps({"model": "org/tiny", "messages": [{"role": "user", "content": "hi"}], "x_sleep": 30})
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
    )
    wait_until(lambda: gateway.status()["open_requests"] > 0, "the request reached the worker")
    sock.close()
    # Well before the worker's answer at 30 s: only the hang-up can have ended it (a busy machine may be slow).
    wait_until(lambda: gateway.status()["open_requests"] == 0, "the hung-up request ended", timeout=20)
    assert gateway.control("POST", "unload").status == 200  # nothing open blocks an unload


@pytest.fixture(scope="module")
def three_slots_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run one front with room for 3 connections over the stand-in worker, for the module's two tests of the limit."""
    with running_gateway(tmp_path_factory.mktemp("three-slots"), max_connections=3) as gateway:
        yield gateway


@pytest.fixture
def three_slots(three_slots_front: Gateway) -> Iterator[Gateway]:
    """Return the 3-slot front settled (every slot free); after the test, check that it let every connection go."""
    yield settled(three_slots_front)
    settled(three_slots_front)  # the next test's slots are all free: the front recovered from this one


def test_a_connection_past_the_limit_closes_the_longest_waiting_one(three_slots: Gateway) -> None:
    """With max_connections 3 held by silent clients, a fourth closes the oldest of them and is served."""
    gateway = three_slots  # this module's front of 3 slots, none held
    held: list[socket.socket] = []
    while len(held) < 3:  # one at a time: the front has taken each before the next arrives
        held.append(connect(gateway))
        wait_until(lambda: accepted_connections(gateway.proc.pid, gateway.port) == len(held), "the front took it")
    newcomer = connect(gateway)
    newcomer.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n\r\n".encode())
    newcomer.settimeout(10)
    assert b" 200 " in newcomer.recv(4096).split(b"\r\n")[0]
    assert closed_within(held[0], 5)  # the oldest waiting one made room
    for sock in held[1:]:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n\r\n".encode())
        sock.settimeout(10)
        assert b" 200 " in sock.recv(4096).split(b"\r\n")[0]
        sock.close()


def test_connections_past_the_limit_are_refused_when_every_open_one_is_busy(three_slots: Gateway) -> None:
    """With max_connections 3 all streaming replies, a fourth is closed at once; the three streams still end."""
    gateway = three_slots  # this module's front of 3 slots, none held
    assert gateway.chat().status == 200  # loaded
    busy = [connect(gateway) for _ in range(3)]
    for sock in busy:
        sock.sendall(stream_request(gateway, x_chunks=100, x_delay=0.05))
        received = b""
        while b"data: " not in received:  # its request is whole and answered: busy
            received += sock.recv(65536)
    extra = connect(gateway)
    assert closed_within(extra, 5)
    for sock in busy:
        sock.settimeout(60)
        received = b""
        while not received.endswith(b"0\r\n\r\n"):  # the stream's last chunk
            piece = sock.recv(65536)
            assert piece, "the front closed a busy connection"
            received += piece
        assert b"data: [DONE]" in received
        sock.close()
    wait_until(lambda: accepted_connections(gateway.proc.pid, gateway.port) == 0, "the front let them go")
    assert gateway.request("GET", "/health").status == 200  # room again once they closed


def raw_post(gateway: Gateway, path: str, doc: dict[str, object]) -> bytes:
    """Return the raw HTTP/1.1 request that POSTs ``doc`` as JSON to ``path``."""
    body = json.dumps(doc)
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


def stream_request(gateway: Gateway, **fields: object) -> bytes:
    """Return the raw HTTP/1.1 request of a streamed chat completion with the stand-in's ``fields``."""
    doc = {"model": "org/tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True, **fields}
    return raw_post(gateway, "/v1/chat/completions", doc)


def test_a_client_that_hangs_up_ends_its_streamed_request(standin: Gateway) -> None:
    """A streaming client that disconnects after its first event ends its request long before the stream would."""
    gateway = standin  # the shared front
    assert gateway.chat().status == 200  # loaded
    sock = connect(gateway)
    sock.sendall(stream_request(gateway, x_chunks=2000, x_delay=0.02))  # 40 s of events
    received = b""
    while b"data: " not in received:
        received += sock.recv(65536)
    sock.close()
    wait_until(lambda: gateway.status()["open_requests"] == 0, "the hung-up stream ended", timeout=10)
    assert gateway.chat().status == 200


def test_a_client_that_reads_slowly_gets_the_whole_stream(standin: Gateway) -> None:
    """A client far behind a fast stream (megabytes waiting) pauses the worker, then gets every event and [DONE]."""
    chunks = 40000  # about 9 MB of events, written by the worker as fast as it can: more than the kernel holds
    gateway = standin  # the shared front
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gateway.port))
    sock.settimeout(30)
    sock.sendall(stream_request(gateway, x_chunks=chunks))
    # The client reads nothing: the front's buffer passes its mark and it stops reading from the worker, whose
    # bytes then wait unread in the front's socket, more than the front itself would hold before pausing.
    wait_until(lambda: unread_bytes(gateway.proc.pid, gateway.port) > HIGH_WATER, "the worker paused")
    received = bytearray()
    while not received.endswith(b"0\r\n\r\n"):
        piece = sock.recv(4096)
        assert piece, "the front closed the stream early"
        received += piece
    sock.close()
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head
    events = [e for e in dechunk(body).split(b"\n\n") if e.startswith(b"data: {")]
    texts = [json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events if b'"choices": [{' in e]
    assert texts == [f"t{i} " for i in range(chunks)]
    assert dechunk(body).endswith(b"data: [DONE]\n\n")


def dechunk(body: bytes) -> bytes:
    """Return a chunked HTTP/1.1 body's payload."""
    out, at = bytearray(), 0
    while True:
        end = body.index(b"\r\n", at)
        size = int(body[at:end], 16)
        if size == 0:
            return bytes(out)
        out += body[end + 2 : end + 2 + size]
        at = end + 4 + size


def test_an_http_1_0_client_gets_its_stream_unchunked_until_the_close(standin: Gateway) -> None:
    """An HTTP/1.0 client's stream is written as is (no chunk framing) and ends where the front closes it."""
    gateway = standin  # the shared front
    sock = connect(gateway)
    sock.sendall(stream_request(gateway, x_chunks=50).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
    received = bytearray()
    assert closed_within_reading(sock, received, 30)
    head, _, body = bytes(received).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: {")]
    assert [json.loads(e[6:])["choices"][0]["delta"]["content"] for e in events] == [f"t{i} " for i in range(50)]
    assert body.endswith(b"data: [DONE]\n\n")


def closed_within_reading(sock: socket.socket, into: bytearray, seconds: float) -> bool:
    """Read ``sock`` into ``into`` until the front closes it; say whether that happened within ``seconds``."""
    sock.settimeout(seconds)
    try:
        while piece := sock.recv(65536):
            into += piece
        return True
    except TimeoutError:
        return False


def test_a_stream_read_to_its_end_is_logged_200_and_one_cut_short_499(standin: Gateway) -> None:
    """A client that closes on a stream's last event is logged with the stream's 200; one that hangs up midway, 499."""
    gateway = standin  # the shared front: its log's lines counted from here
    logged = len(request_statuses(gateway))
    assert gateway.chat().status == 200  # loaded
    sent = [
        (stream_request(gateway, x_chunks=3), b"[DONE]"),
        # Codex closes on response.completed, before the worker's [DONE]
        (raw_post(gateway, "/v1/responses", {"model": "org/tiny", "input": "hi", "stream": True}), b"completed"),
        (stream_request(gateway, x_chunks=2000, x_delay=0.02), b"data: "),
    ]
    for request, until in sent:
        sock = connect(gateway)
        sock.sendall(request)
        received = b""
        while until not in received:
            received += sock.recv(65536)
        sock.close()
        wait_until(lambda: gateway.status()["open_requests"] == 0, "the closed stream ended", timeout=10)
    wait_until(lambda: len(request_statuses(gateway)) >= logged + 4, "the four requests logged", timeout=10)
    assert request_statuses(gateway)[logged:] == [200, 200, 200, 499]
