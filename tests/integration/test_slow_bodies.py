"""Slow and unwanted request bodies: they lock no one out, are cut off past their limits, are not read if refused.

Issue 28, item 1 and the front's share of item 8.

The attack is the one the issue reproduced, scaled to a small ``max_connections``: many connections that send
a chat completion's complete headers with ``Content-Length: 1000000`` and ``{``, then a byte now and then, and
reopen any connection the front closes. It runs as a real process, as the test's own user or as a real second
user (``setpriv``, root only, as tests/integration/test_hostile_machine.py does).
"""

from __future__ import annotations

import contextlib
import json
import pwd
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.conditions import accepted_connections, wait_until
from tests.front_clients import closed_within, connect, request_statuses
from tests.gateway_support import Gateway, running_gateway
from tests.standin_fronts import settled

# argv: port, connections, key ("" for none). Holds that many connections in their bodies, a byte a second
# each, reopening every one the front closes (slowloris' way), until killed. Prints "attacking" once all are open.
SLOW_BODIES = r"""
import select, socket, sys, time
port, count, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
auth = f"Authorization: Bearer {key}\r\n" if key else ""
head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"{auth}Content-Length: 1000000\r\n\r\n{{").encode()

def opened():
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(head)
        sock.setblocking(False)
        return sock
    except OSError:
        return None

socks = [opened() for _ in range(count)]
print("attacking", flush=True)
while True:
    time.sleep(1)
    live = [s for s in socks if s is not None]
    readable = select.select(live, [], [], 0)[0] if live else []
    for i, sock in enumerate(socks):
        if sock is not None and sock not in readable:
            try:
                sock.send(b" ")
                continue
            except OSError:
                pass
        if sock is not None:  # an answer (401, 408) or a close: the front is done with it, so open another
            sock.close()
        socks[i] = opened()
"""
KEY = "sk-slow-bodies-test-key"
SLOTS = 8  # the attacked front's max_connections
CHAT = {"model": "org/tiny", "messages": [{"role": "user", "content": "hi"}]}


def metric(gateway: Gateway, name: str, headers: dict[str, str] | None = None) -> float:
    """Return one sample of the front's /metrics (``name`` with its labels, as exposed)."""
    text = gateway.request("GET", "/metrics", headers=headers).body.decode()
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found, text
    return float(found.group(1))


@pytest.fixture
def attack(request: pytest.FixtureRequest) -> Iterator[list[subprocess.Popen[str]]]:
    """Collect the attack processes a test starts, and kill them afterwards."""
    started: list[subprocess.Popen[str]] = []
    yield started
    end(started)


def end(attacks: list[subprocess.Popen[str]]) -> None:
    """Kill the attack processes and reap them (again: a no-op)."""
    for proc in attacks:
        proc.kill()
        proc.wait()


def start_attack(
    started: list[subprocess.Popen[str]], port: int, count: int, key: str, user: pwd.struct_passwd | None
) -> None:
    """Start the slow-body attack (as ``user`` when given) and wait until all its connections are open."""
    argv = [sys.executable, "-c", SLOW_BODIES, str(port), str(count), key]
    if user is not None:
        argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    started.append(proc)
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    assert line.strip() == "attacking", (line, proc.stderr.read() if proc.poll() is not None else "")


def normal_requests(gateway: Gateway, key: str, count: int) -> int:
    """Send ``count`` chat completions with the OpenAI SDK (its default retries); return how many got a reply."""
    served = 0
    with openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key=key, timeout=20, max_retries=2) as client:
        for _ in range(count):  # the client's kept-alive connection is closed at the end
            try:
                reply = client.chat.completions.create(model="org/tiny", messages=[{"role": "user", "content": "hi"}])
            except openai.APIConnectionError:
                continue
            served += reply.choices[0].message.content == "ok"
    return served


def every_slot_taken(gateway: Gateway) -> None:
    """Wait until the attack holds all 8 of the front's connections (its 40 have made room for one another)."""
    wait_until(lambda: accepted_connections(gateway.proc.pid, gateway.port) == SLOTS, f"{SLOTS} connections held")


@contextlib.contextmanager
def attacked_front(tmp_path: Path, keyed: bool) -> Iterator[Gateway]:
    """Start a front with room for 8 connections, whose only defence against slow bodies is making room."""
    keys = [KEY] if keyed else None
    with running_gateway(
        tmp_path, api_keys=keys, max_connections=SLOTS, body_timeout=600.0, body_min_rate=0.0
    ) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def keyed_attacked_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run the keyed front of 8 slots for the module's three attacks on it (each ends with every slot free)."""
    with attacked_front(tmp_path_factory.mktemp("keyed-attacked"), keyed=True) as gateway:
        yield gateway


@pytest.fixture
def keyed_attacked(keyed_attacked_front: Gateway, attack: list[subprocess.Popen[str]]) -> Iterator[Gateway]:
    """Return the keyed front of 8 slots settled; once the test's attack is ended, check that it frees every slot."""
    yield settled(keyed_attacked_front)
    end(attack)
    settled(keyed_attacked_front)  # recovered: no connection held, nothing open, before the next attack


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
def test_slow_bodies_from_the_same_user_do_not_lock_out_new_clients(
    tmp_path: Path, request: pytest.FixtureRequest, attack: list[subprocess.Popen[str]], keyed: bool
) -> None:
    """40 slow-body connections (with the key, on a keyed front) against 8 slots: normal requests are all served."""
    auth = {"Authorization": f"Bearer {KEY}"}
    with (
        contextlib.nullcontext(request.getfixturevalue("keyed_attacked")) if keyed else attacked_front(tmp_path, keyed)
    ) as gateway:
        evicted = metric(gateway, 'mlx_agent_connections_closed_total{reason="evicted"}', auth)  # counted from here
        assert gateway.request("POST", "/v1/chat/completions", CHAT, headers=auth).status == 200
        start_attack(attack, gateway.port, 40, KEY if keyed else "", None)
        every_slot_taken(gateway)
        assert attack[0].poll() is None
        assert normal_requests(gateway, KEY, 10) == 10
        assert metric(gateway, 'mlx_agent_connections_closed_total{reason="evicted"}', auth) > evicted


@pytest.mark.parametrize("with_key", [True, False], ids=["with_key", "without_key"])
def test_slow_bodies_from_another_user_do_not_lock_out_new_clients(
    keyed_attacked: Gateway, attack: list[subprocess.Popen[str]], attacker: pwd.struct_passwd, with_key: bool
) -> None:
    """A second user's 40 slow-body connections against a keyed front's 8 slots: normal requests are all served."""
    gateway = keyed_attacked  # the module's keyed front of 8 slots, every slot free
    start_attack(attack, gateway.port, 40, KEY if with_key else "", attacker)
    every_slot_taken(gateway)
    assert attack[0].poll() is None
    assert normal_requests(gateway, KEY, 10) == 10


def test_a_body_past_its_deadline_is_408_and_its_connection_closed(tmp_path: Path) -> None:
    """A body still arriving body_timeout seconds after its headers gets 408 body_timeout, then a close; it counts."""
    with running_gateway(tmp_path, body_timeout=1.0, body_min_rate=0.0) as gateway:
        sock = connect(gateway)
        sock.sendall(slow_head(gateway) + b"{")
        head, body = read_answer(sock)
        assert head.startswith(b"HTTP/1.1 408 ")
        assert json.loads(body)["error"]["code"] == "body_timeout"
        assert closed_within(sock, 5)
        assert metric(gateway, 'mlx_agent_connections_closed_total{reason="body_timeout"}') == 1
        assert gateway.chat().status == 200  # others are served all along


def test_a_body_below_the_minimum_rate_is_408_and_a_prompt_one_is_not(tmp_path: Path) -> None:
    """A body trickling under body_min_rate after body_grace is cut off with 408; a body sent whole is answered."""
    with running_gateway(tmp_path, body_timeout=600.0, body_min_rate=100.0, body_grace=1.0) as gateway:
        assert gateway.chat("x" * 200_000).status == 200
        sock = connect(gateway)
        sock.sendall(slow_head(gateway) + b"{")
        sock.settimeout(0.5)
        answer = b""
        for _ in range(60):  # a byte every half second: 2 bytes/s
            try:
                sock.send(b" ")
                answer += sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if b"\r\n\r\n" in answer:
                break
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b'"body_timeout"' in answer
        assert closed_within(sock, 5)


def slow_head(gateway: Gateway, *, key: str | None = None, host: str | None = None) -> bytes:
    """Return complete headers of a chat completion that announces a 1,000,000-byte body."""
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host or f'127.0.0.1:{gateway.port}'}\r\n"
        f"Content-Type: application/json\r\n{auth}Content-Length: 1000000\r\n\r\n"
    ).encode()


def read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """Read one answer with a Content-Length; return its head and body."""
    sock.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, data
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        piece = sock.recv(65536)
        assert piece, data
        body += piece
    return head, body


@pytest.mark.parametrize(
    ("key", "host", "status"),
    [(None, None, 401), ("sk-wrong", None, 401), (KEY, "evil.example:80", 403)],
    ids=["no_key", "wrong_key", "foreign_host"],
)
def test_a_body_refused_by_its_headers_is_never_read(
    keyed_standin: Gateway, key: str | None, host: str | None, status: int
) -> None:
    """With only the headers sent, a keyed front answers 401 (403 for a foreign Host) and closes: no body is read."""
    gateway = keyed_standin  # the shared keyed front (KEY is one of its keys)
    sock = connect(gateway)
    sock.sendall(slow_head(gateway, key=key, host=host))  # and not one byte of the body
    head, body = read_answer(sock)
    assert head.startswith(f"HTTP/1.1 {status} ".encode())
    assert b"error" in body
    assert closed_within(sock, 5)  # not kept open to read (and drop) the rest of the body


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-8-sig"])
def test_a_body_that_is_not_utf8_is_400_invalid_encoding(standin: Gateway, encoding: str) -> None:
    """A JSON body in UTF-16 or UTF-32, or with a byte order mark, is 400 invalid_encoding in each API's shape."""
    doc = {"model": "org/tiny", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    gateway = standin  # the shared front
    raw = json.dumps(doc).encode(encoding)
    chat = gateway.request("POST", "/v1/chat/completions", raw=raw)
    assert chat.status == 400
    assert (chat.json()["error"]["code"], chat.json()["error"]["param"]) == ("invalid_encoding", "body")
    messages = gateway.request("POST", "/v1/messages", raw=raw, headers={"anthropic-version": "2023-06-01"})
    assert messages.status == 400
    assert messages.json()["type"] == "error"
    assert messages.json()["error"]["code"] == "invalid_encoding"
    assert gateway.request("POST", "/v1/chat/completions", raw=json.dumps(doc).encode()).status == 200


@pytest.mark.parametrize("how", ["close", "shutdown"])
def test_a_client_that_hangs_up_mid_body_is_logged_499(standin: Gateway, how: str) -> None:
    """A client that closes (or ends its side) before its body has all arrived is a 499, not a 500 and a traceback."""
    gateway = standin  # the shared front: its log's lines counted from here
    logged = len(request_statuses(gateway))
    sock = connect(gateway)
    sock.sendall(slow_head(gateway) + b'{"model": "org/tiny", ')
    wait_until(lambda: read_all_of(gateway, sock), "the front is reading the body (all sent so far read)")
    if how == "shutdown":
        sock.shutdown(socket.SHUT_WR)  # the body will never be whole: the client has hung up
    else:
        sock.close()
    deadline = time.monotonic() + 10
    while len(request_statuses(gateway)) == logged:
        assert time.monotonic() < deadline, gateway.log_path.read_text()
        time.sleep(0.05)
    assert request_statuses(gateway)[logged:] == [499]
    assert "Traceback" not in gateway.log_path.read_text()
    sock.close()


def read_all_of(gateway: Gateway, sock: socket.socket) -> bool:
    """Say whether the front has accepted ``sock``'s connection and read every byte sent on it so far."""
    if accepted_connections(gateway.proc.pid, gateway.port) == 0:
        return False
    ends = (gateway.port, sock.getsockname()[1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()  # sl local_address rem_address st tx_queue:rx_queue ...
        if tuple(int(address.split(":")[1], 16) for address in fields[1:3]) == ends:
            return int(fields[4].split(":")[1], 16) == 0
    return False


def test_a_client_that_sends_a_refused_body_whole_reads_its_answer(tmp_path: Path) -> None:
    """A body refused from its headers but sent in full (too large, or without the key) is answered, not reset."""
    with running_gateway(tmp_path, api_keys=[KEY], max_body_bytes=16 * 1024 * 1024) as gateway:
        too_large = b"x" * (gateway.config["max_body_bytes"] + 1)
        for _ in range(5):  # a close without draining breaks the client's pipe most times, not every time
            keyed = gateway.request(
                "POST", "/v1/chat/completions", raw=too_large, headers={"Authorization": f"Bearer {KEY}"}
            )
            assert keyed.status == 413
            unkeyed = gateway.request(
                "POST", "/v1/chat/completions", raw=b"{" + b" " * (gateway.config["max_body_bytes"] - 2) + b"}"
            )
            assert unkeyed.status == 401
