"""The embedding worker's own Unix socket under hostile clients: the front's body cap and read deadlines.

The same limits the mlx_lm worker keeps (tests/e2e/test_worker_socket.py), on the real ``mlx-vlm-embed``
worker of the tiny embedding model: raw HTTP to its socket, as a broken or hostile client would speak it. This
worker serves one request at a time, so a client that never finishes would otherwise hold it for ever; each
test ends by checking that it still embeds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlx_agent.api_errors import Code
from mlx_agent.wire import MAX_BODY_BYTES
from tests.e2e.worker_socket_support import (
    SHORT_DEADLINES,
    SocketWorker,
    closed_by_peer,
    is_api_error,
    read_answer,
    socket_worker,
)

pytestmark = pytest.mark.e2e

EMBED_HEAD = b"POST /v1/embeddings HTTP/1.1\r\nHost: worker\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def worker(embed_model: Path) -> Iterator[SocketWorker]:
    """Start one embedding worker of the session's tiny embedding model on its socket with short read deadlines."""
    with socket_worker(embed_model, SHORT_DEADLINES, runtime="mlx-vlm-embed") as started:
        yield started


def embeds(worker: SocketWorker) -> bool:
    """Say whether a one-string embeddings request is answered 200 with one vector."""
    answer = worker.post({"input": "hello"}, path="/v1/embeddings")
    return answer.status == 200 and len(answer.json()["data"]) == 1


def test_a_body_over_the_fronts_cap_is_413_before_it_is_read(worker: SocketWorker) -> None:
    """A Content-Length past the front's cap (16 MiB, no longer the worker's own 64) is 413, the body unread."""
    with worker.connect() as sock:
        sock.sendall(EMBED_HEAD + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode() + b"{" + b" " * (1 << 20))
        answer = read_answer(sock)
    assert answer.status == 413 and is_api_error(answer.json(), Code.BODY_TOO_LARGE), answer
    assert str(MAX_BODY_BYTES) in answer.json()["error"]["message"]
    assert embeds(worker)


def test_a_missing_content_length_is_411(worker: SocketWorker) -> None:
    """A POST without Content-Length is 411 length_required, not a body read to the connection's end."""
    answer = worker.exchange(EMBED_HEAD + b"\r\n")
    assert answer.status == 411 and is_api_error(answer.json(), Code.LENGTH_REQUIRED), answer
    assert embeds(worker)


def test_headers_sent_a_byte_at_a_time_are_closed_at_their_deadline(worker: SocketWorker) -> None:
    """A request whose headers trickle in one byte at a time is closed once the header deadline passes."""
    with worker.connect() as sock:
        assert closed_by_peer(sock, EMBED_HEAD + b"X-Filler: " + b"a" * 2000) is not None
    assert embeds(worker)


def test_a_body_sent_a_byte_at_a_time_is_408_and_closed(worker: SocketWorker) -> None:
    """Complete headers, then a body one byte at a time: 408 body_timeout at the body deadline, then the close."""
    with worker.connect() as sock:
        sock.sendall(EMBED_HEAD + b"Content-Length: 100000\r\n\r\n")
        received = closed_by_peer(sock, b'{"input": ' + b" " * 2000)
    assert received is not None, "the worker never closed the slow body"
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.split()[1] == b"408" and is_api_error(json.loads(body), Code.BODY_TIMEOUT), received
    assert embeds(worker)


def test_a_client_gone_mid_body_leaves_the_worker_serving(worker: SocketWorker) -> None:
    """A client that hangs up after part of its body gets nothing and holds nothing: the next request embeds."""
    with worker.connect() as sock:
        sock.sendall(EMBED_HEAD + b"Content-Length: 1000\r\n\r\n" + b'{"input": "he')
    assert embeds(worker)
