"""The bounded fuzz of ``test_fuzz_requests.py``, sent straight to a wrapped worker on its own Unix socket.

As a client that got past the front (or a broken front) would: hostile fields and raw bodies to its two
endpoints, and hostile framing (Content-Length missing, negative, past the cap, short; odd methods and request
lines), with the same bounds and seed. After every case a 2xx reply or a 4xx error, never a 5xx or a hang, and
a normal chat is served; at the end the worker is the process first started. The worker is the one
``test_worker_socket.py`` shares (``tiny_socket_worker``: started as a front starts it, on the tiny model, with
a 256-token context that bounds a reply whatever ``max_tokens`` a case asks).
"""

from __future__ import annotations

import http.client
import json
import socket
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlx_agent.wire import MAX_BODY_BYTES, WORKER_MODEL_NAME
from tests.e2e.front_support import HI
from tests.e2e.fuzz_support import FIELDS, FUZZ, api_error, deep, reply, values
from tests.e2e.worker_socket_support import SocketWorker

pytestmark = pytest.mark.e2e

SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module")
def worker(tiny_socket_worker: SocketWorker) -> Iterator[SocketWorker]:
    """Return the shared worker on its socket, which the whole file fuzzes; print what the cases got."""
    yield tiny_socket_worker
    exit_code = tiny_socket_worker.process.poll()
    print(f"\nfuzz: {sum(SEEN.values())} requests, {dict(sorted(SEEN.items()))}; worker exit code {exit_code}")


WORKER_FUZZ = settings(FUZZ, max_examples=60)
WORKER_BASES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": WORKER_MODEL_NAME, "messages": HI, "max_tokens": 3},
    "/v1/completions": {"model": WORKER_MODEL_NAME, "prompt": "Once", "max_tokens": 3},
}


class UnixConnection(http.client.HTTPConnection):
    """http.client over the worker's Unix socket."""

    def __init__(self, path: str, timeout: float = 60) -> None:
        super().__init__("worker", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        """Connect to the socket instead of a TCP address."""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


@pytest.fixture(scope="module")
def socket_path(worker: SocketWorker) -> str:
    """Return the Unix socket the worker listens on (once: a worker that exited fails the next case)."""
    assert worker.process.poll() is None, worker.log()[-3000:]
    return worker.path


def worker_exchange(path: str, raw: bytes, method: str = "POST") -> tuple[int, str, bytes]:
    """Send raw request bytes to the worker's socket; return the status, content type and body (to the end)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(path)
        sock.sendall(raw)
        with sock.makefile("rb") as stream:
            answer = http.client.HTTPResponse(sock, method=method)  # a HEAD answer has no body to read
            answer.fp = stream
            answer.begin()
            return answer.status, answer.getheader("Content-Type") or "", answer.read()


def worker_healthy(path: str) -> bool:
    """Say whether the worker answers a normal chat on its socket."""
    body = json.dumps(WORKER_BASES["/v1/chat/completions"]).encode()
    return worker_attempt_raw(path, "/v1/chat/completions", body)[0] == 200


def worker_attempt_raw(path: str, endpoint: str, raw: bytes) -> tuple[int, str, bytes]:
    """POST ``raw`` to ``endpoint`` on the worker's socket."""
    conn = UnixConnection(path)
    try:
        conn.request("POST", endpoint, body=raw, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, answer.getheader("Content-Type") or "", answer.read()
    finally:
        conn.close()


def worker_attempt(path: str, endpoint: str, answer: tuple[int, str, bytes], case: object) -> None:
    """Check one worker answer: a 2xx reply or a 4xx OpenAI error, never a 5xx; then a normal chat is served."""
    status, content_type, text = answer
    SEEN[f"worker {status // 100}xx"] += 1
    if 200 <= status < 300:
        assert reply(endpoint, content_type, text), (case, status, text[:300])
    else:
        assert 400 <= status < 500, (case, status, text[:300])
        assert content_type.startswith("application/json") and api_error(endpoint, json.loads(text)), (case, text)
    assert worker_healthy(path), case


@pytest.mark.parametrize("endpoint", list(WORKER_BASES))
@WORKER_FUZZ
@given(data=st.data())
def test_hostile_fields_never_break_the_worker_socket(socket_path: str, endpoint: str, data: st.DataObject) -> None:
    """Straight to the worker's socket, one to three fields replaced by anything: a reply or a 4xx, never a 5xx."""
    body = dict(WORKER_BASES[endpoint])
    names = data.draw(st.lists(st.sampled_from(FIELDS[endpoint]), min_size=1, max_size=3, unique=True))
    for name in names:
        body[name] = data.draw(st.one_of(values, deep) if name == "messages" else values)
    if body.get("stream") is True:
        body["max_tokens"] = 3
    raw = json.dumps(body, allow_nan=True).encode()
    worker_attempt(socket_path, endpoint, worker_attempt_raw(socket_path, endpoint, raw), raw[:300])


@WORKER_FUZZ
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_bodies_that_are_not_json_are_4xx_on_the_worker_socket(socket_path: str, raw: bytes) -> None:
    """Arbitrary bytes as a chat body on the worker's socket: a 4xx OpenAI error, and the worker serves on."""
    status, content_type, text = worker_attempt_raw(socket_path, "/v1/chat/completions", raw)
    assert 400 <= status < 500, (raw, status, text[:300])
    worker_attempt(socket_path, "/v1/chat/completions", (status, content_type, text), raw)


LENGTHS = st.sampled_from(["", "-1", "abc", "1e3", " 12", "99999999999999999999", str(MAX_BODY_BYTES + 1), "5"])
METHODS = st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "HEAD", "BREW", "post"])
TARGETS = st.sampled_from(["/v1/chat/completions", "/v1/completions", "/health", "/v1/models", "/x", "*", ""])


@WORKER_FUZZ
@given(method=METHODS, target=TARGETS, length=LENGTHS, version=st.sampled_from(["HTTP/1.0", "HTTP/1.1", "HTTP/9"]))
def test_hostile_framing_never_breaks_the_worker_socket(
    socket_path: str, method: str, target: str, length: str, version: str
) -> None:
    """Odd methods, targets, versions and Content-Lengths (short bodies included): never a 5xx, never a hang."""
    head = f"{method} {target} {version}\r\nHost: worker\r\nContent-Type: application/json\r\n"
    if length:
        head += f"Content-Length: {length}\r\n"
    raw = head.encode() + b"\r\n" + b'{"messages": []}'  # shorter than most lengths: a body cut short
    status, content_type, text = worker_exchange(socket_path, raw, method)
    SEEN[f"worker {status // 100}xx"] += 1
    assert status < 500, (raw, status, text[:300])
    if status >= 400 and method != "HEAD":
        assert content_type.startswith("application/json") and api_error("/", json.loads(text)), (raw, text)
    assert worker_healthy(socket_path), raw


def test_the_worker_never_restarted(worker: SocketWorker) -> None:
    """After the fuzz the worker is the first one: nothing crashed it."""
    assert worker.process.poll() is None, worker.log()[-3000:]  # our child: had it exited, poll() would say
