"""The wrapped worker's own Unix socket under hostile clients: a body cap, read deadlines, a prompt-size check.

Only the worker's front can open the socket, and the front forwards only what passed its own limits; these
tests speak raw HTTP to a real worker's socket as a broken or hostile client would, and check that it
refuses in the API's error shape, closes what is too slow, and then still serves a normal request.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from mlx_agent.api_errors import Code
from mlx_agent.runtime.serving.prompt_size import SAFETY
from mlx_agent.wire import MAX_BODY_BYTES
from tests.e2e.worker_socket_support import CHAT_HEAD, SocketWorker, closed_by_peer, is_api_error, read_answer

pytestmark = pytest.mark.e2e

# A huge prompt: about 8 MB of text, well inside the body cap and far past any context of this model.
HUGE = 8 * 1024 * 1024
# What the worker's peak memory may grow by while it refuses HUGE: a few copies of the body, not a
# tokenization of it (that took a worker from hundreds of MB to 1.8 GB).
HUGE_GROWTH_BOUND = 400 * 1024 * 1024


@pytest.fixture
def worker(tiny_socket_worker: SocketWorker) -> SocketWorker:
    """Return the shared worker (short read deadlines, a 256-token context): each test checks it serves on after."""
    return tiny_socket_worker


def test_a_body_over_the_fronts_cap_is_413_before_it_is_read(worker: SocketWorker) -> None:
    """A Content-Length past the front's cap is 413 body_too_large, answered without reading the body."""
    with worker.connect() as sock:
        sock.sendall(CHAT_HEAD + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode() + b"{" + b" " * (1 << 20))
        answer = read_answer(sock)
    assert answer.status == 413 and is_api_error(answer.json(), Code.BODY_TOO_LARGE), answer
    assert worker.healthy()


def test_headers_sent_a_byte_at_a_time_are_closed_at_their_deadline(worker: SocketWorker) -> None:
    """A request whose headers trickle in one byte at a time is closed once the header deadline passes."""
    with worker.connect() as sock:
        assert closed_by_peer(sock, CHAT_HEAD + b"X-Filler: " + b"a" * 2000) is not None
    assert worker.healthy()


def test_a_body_sent_a_byte_at_a_time_is_408_and_closed(worker: SocketWorker) -> None:
    """Complete headers, then a body one byte at a time: 408 body_timeout at the body deadline, then the close."""
    with worker.connect() as sock:
        sock.sendall(CHAT_HEAD + b"Content-Length: 100000\r\n\r\n")
        received = closed_by_peer(sock, b'{"messages": ' + b" " * 2000)
    assert received is not None, "the worker never closed the slow body"
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.split()[1] == b"408" and is_api_error(json.loads(body), Code.BODY_TIMEOUT), received
    assert worker.healthy()


def test_a_huge_prompt_is_refused_by_its_size_before_it_is_tokenized(worker: SocketWorker) -> None:
    """An 8 MB prompt is refused context_length_exceeded by its size: the peak memory barely moves, then a chat."""
    before = worker.peak_rss()
    answer = worker.post({"messages": [{"role": "user", "content": "word " * (HUGE // 5)}], "max_tokens": 2})
    assert answer.status == 400 and is_api_error(answer.json(), Code.CONTEXT_LENGTH_EXCEEDED), answer
    assert "characters" in answer.json()["error"]["message"]  # the size check's refusal, not the tokenizer's
    assert worker.peak_rss() - before < HUGE_GROWTH_BOUND, (before, worker.peak_rss())
    assert worker.healthy()


def densest_text(model: Path, tokens: int) -> tuple[str, int]:
    """Return text of about ``tokens`` tokens made of the tokenizer's longest plain word, and its token count."""
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    for _, token in sorted(tokenizer.get_vocab().items(), key=lambda item: -len(item[0])):
        word = tokenizer.decode([token])
        if word and tokenizer.encode(word * 3).ids == [token] * 3:  # a word that stays one token when repeated
            text = word * tokens
            return text, len(tokenizer.encode(text).ids)
    raise AssertionError("no vocabulary entry repeats as itself")


def test_a_prompt_just_inside_the_context_is_still_served(worker: SocketWorker, tiny_model: Path) -> None:
    """A prompt of the densest text filling most of the context passes the size check and is answered."""
    text, counted = densest_text(tiny_model, worker.context_window - 40)
    assert counted < worker.context_window - 20  # it fits, with room for the template and a reply
    answer = worker.post({"messages": [{"role": "user", "content": text}], "max_tokens": 2})
    assert answer.status == 200, answer
    assert answer.json()["usage"]["prompt_tokens"] < worker.context_window
    too_long = text * (SAFETY * 2 * worker.context_window // max(counted, 1) + 1)  # far past the bound
    refused = worker.post({"messages": [{"role": "user", "content": too_long}], "max_tokens": 2})
    assert refused.status == 400 and is_api_error(refused.json(), Code.CONTEXT_LENGTH_EXCEEDED), refused


def test_the_worker_tokenizes_and_checks_the_body_itself(worker: SocketWorker) -> None:
    """The worker answers /v1/tokenize on its own socket and refuses a body its declaration refuses, as the front."""
    answer = worker.post({"model": "default_model", "text": "hello"}, path="/v1/tokenize")
    assert answer.status == 200 and answer.json()["count"] == len(answer.json()["tokens"]) > 0
    refused = worker.post({"text": 3}, path="/v1/tokenize")
    assert refused.status == 400 and is_api_error(refused.json(), Code.INVALID_TYPE)
    unknown = worker.post({"text": "hello"}, path="/v1/detokenize")
    assert unknown.status == 404 and is_api_error(unknown.json(), Code.UNKNOWN_ENDPOINT)
