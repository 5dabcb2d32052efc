"""Watching a reply's client and generation thread (socket pairs and queues stand in for mlx_lm)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from queue import Queue
from typing import Any

import pytest
from mlx_lm.server import Response

from mlx_agent.errors import ClientGone, HttpError, TemplateFailed
from mlx_agent.runtime.serving.cancel import ReplyStream, client_gone


class Context:
    """Stands in for mlx_lm's GenerationContext."""

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        """Record that the reply was stopped."""
        self.stopped = True


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """Return a connected (server side, client side) pair of sockets."""
    server_side, client_side = socket.socketpair()
    yield server_side, client_side
    server_side.close()
    client_side.close()


def token(text: str, finish_reason: str | None = None) -> Response:
    """Return one of mlx_lm's token responses."""
    return Response(text, 1, 0.0, finish_reason, ())  # type: ignore[arg-type]  # upstream's annotation is too narrow


def test_an_open_connection_is_not_gone(pair: tuple[socket.socket, socket.socket]) -> None:
    """A client waiting for its answer is still there; one that sent more bytes is too."""
    server_side, client_side = pair
    assert not client_gone(server_side)
    client_side.sendall(b"x")
    assert not client_gone(server_side)
    assert not client_gone(None)


def test_a_closed_connection_is_gone(pair: tuple[socket.socket, socket.socket]) -> None:
    """A client that closed its end is gone."""
    server_side, client_side = pair
    client_side.close()
    assert client_gone(server_side)


def stream_of(
    items: list[Any], connection: socket.socket | None = None, alive: bool = True, cut: str | None = None
) -> tuple[ReplyStream, Context]:
    """Return a stream over a queue holding ``items``."""
    queue: Queue[Any] = Queue()
    for item in items:
        queue.put(item)
    context = Context()
    return ReplyStream(context, queue, connection, alive=lambda: alive, label="r1", cut=lambda: cut), context


def test_tokens_pass_through_and_a_cut_reply_is_length() -> None:
    """Tokens are yielded in order; the final one of a reply the watcher cut reports "length"."""
    stream, _ = stream_of([(1, 2), token("a"), token("", "stop"), None], cut="second-guessed itself")
    assert [(r.text, r.finish_reason) for r in stream] == [("a", None), ("", "length")]


def test_a_generation_error_becomes_an_http_error() -> None:
    """A template error handed back by the generation thread is a 400."""
    stream, _ = stream_of([TemplateFailed("bad template")])
    with pytest.raises(HttpError) as failed:
        list(stream)
    assert failed.value.status == 400


def test_a_dead_generation_thread_is_503() -> None:
    """When no token comes and the generation thread is gone, the reply fails with 503."""
    stream, _ = stream_of([token("a")], alive=False)
    with pytest.raises(HttpError) as failed:
        list(stream)
    assert failed.value.status == 503


def test_a_client_that_left_stops_the_reply(
    pair: tuple[socket.socket, socket.socket], caplog: pytest.LogCaptureFixture
) -> None:
    """Once the client has closed its socket, the context is stopped and the log says so, once."""
    server_side, client_side = pair
    client_side.close()
    stream, context = stream_of([token("late")], connection=server_side)
    with caplog.at_level(logging.INFO), pytest.raises(ClientGone):
        list(stream)
    assert context.stopped
    assert (
        "the client went away from r1 after 1 tokens; generation stopped (0 more tokens after the stop)" in caplog.text
    )
    stream.abandon("again")
    assert caplog.text.count("went away") == 1
