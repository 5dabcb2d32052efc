"""Reading a worker's reply by callbacks: its head, its body however it is framed, and how it can break off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mlx_agent.gateway.models.worker_stream import WorkerReply, open_reply


async def answered(socket_path: Path, answer: bytes, *, close: bool = True) -> tuple[WorkerReply, bytes]:
    """Serve ``answer`` (raw bytes) to one request on ``socket_path``; return the reply and the request seen."""
    seen = bytearray()

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.extend(await reader.readuntil(b"\r\n\r\n"))
        length = next(int(h.split(b":")[1]) for h in seen.split(b"\r\n") if h.lower().startswith(b"content-length"))
        seen.extend(await reader.readexactly(length))
        writer.write(answer)
        await writer.drain()
        if close:
            writer.close()

    server = await asyncio.start_unix_server(one, path=str(socket_path))
    async with server:
        reply = await open_reply(str(socket_path), "/v1/x", b'{"a": 1}', {"Authorization": "Bearer k"})
        await asyncio.wait_for(asyncio.shield(reply.ended), 10)
    return reply, bytes(seen)


def run(socket_path: Path, answer: bytes) -> tuple[WorkerReply, bytes, bytes | Exception]:
    """Return the reply, the request the worker saw, and the body (or the error reading it raised)."""

    async def go() -> tuple[WorkerReply, bytes, bytes | Exception]:
        reply, seen = await answered(socket_path, answer)
        try:
            body: bytes | Exception = await reply.body()
        except ConnectionError as exc:
            body = exc
        return reply, seen, body

    return asyncio.run(go())


def test_the_request_is_one_json_post_with_its_headers(tmp_path: Path) -> None:
    """The worker sees one POST with the body's length, the session's headers and Connection: close."""
    _, seen, _ = run(tmp_path / "w.sock", b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}")
    head, _, body = seen.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/x HTTP/1.1\r\n")
    assert b"\r\nContent-Length: 8\r\n" in head and b"\r\nAuthorization: Bearer k\r\n" in head
    assert b"\r\nConnection: close" in head and body == b'{"a": 1}'


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + b'{"ok": true}',  # ends at the close
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n" + b'{"ok": true}',
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\n" + b'{"ok"' + b"\r\n7\r\n" + b": true}" + b"\r\n0\r\n\r\n",
    ],
    ids=["close-delimited", "content-length", "chunked"],
)
def test_a_body_is_read_whole_however_it_is_framed(tmp_path: Path, answer: bytes) -> None:
    """A close-delimited, a Content-Length and a chunked body all come back as the same bytes and status."""
    reply, _, body = run(tmp_path / "w.sock", answer)
    assert (reply.status, reply.content_type, body) == (200, "application/json", b'{"ok": true}')


def test_a_reply_cut_short_of_its_length_is_an_error(tmp_path: Path) -> None:
    """A worker that closes before its Content-Length is reached has broken off: reading it raises."""
    _, _, body = run(tmp_path / "w.sock", b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial')
    assert isinstance(body, ConnectionError) and "before its reply was complete" in str(body)


def test_a_reply_that_is_not_http_is_an_error(tmp_path: Path) -> None:
    """Bytes that are not an HTTP response fail the reply before its head: the caller sees an OSError."""

    async def go() -> None:
        with pytest.raises(OSError, match="not valid HTTP"):
            await answered(tmp_path / "w.sock", b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    asyncio.run(go())


def test_a_stream_reaches_the_sink_in_pieces_as_it_comes(tmp_path: Path) -> None:
    """What came before the sink was set is handed over first, then each piece as it arrives, then the end."""
    socket_path = tmp_path / "w.sock"

    async def go() -> list[bytes]:
        gate = asyncio.Event()

        async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(2)
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n")
            await writer.drain()
            await gate.wait()
            writer.write(b"data: 2\n\n")
            writer.close()

        pieces: list[bytes] = []
        server = await asyncio.start_unix_server(one, path=str(socket_path))
        async with server:
            reply = await open_reply(str(socket_path), "/v1/x", b"{}", {})
            arrived = asyncio.Event()
            reply.on_progress = arrived.set
            if not reply.kept:  # it may have come with the head
                await asyncio.wait_for(arrived.wait(), 10)
            assert reply.kept == [b"data: 1\n\n"]  # the first event arrived before anyone piped it

            def sink(piece: bytes) -> None:
                pieces.append(piece)
                gate.set()

            assert await asyncio.wait_for(reply.pipe(sink), 10) is None
        return pieces

    assert b"".join(asyncio.run(go())) == b"data: 1\n\ndata: 2\n\n"


def test_a_sink_that_fails_ends_the_reply_and_raises_from_pipe(tmp_path: Path) -> None:
    """An error in the sink is not taken for bad HTTP: the connection closes and ``pipe`` raises that error."""
    socket_path = tmp_path / "w.sock"

    async def go() -> None:
        async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(2)
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.write(b"data: 1\n\n")
            await writer.drain()
            await asyncio.sleep(30)  # the front must not wait for this

        def sink(piece: bytes) -> None:
            raise KeyError("translator bug")

        server = await asyncio.start_unix_server(one, path=str(socket_path))
        async with server:
            reply = await open_reply(str(socket_path), "/v1/x", b"{}", {})
            with pytest.raises(KeyError):
                await asyncio.wait_for(reply.pipe(sink), 10)
            assert reply.transport is None or reply.transport.is_closing()

    asyncio.run(go())


def test_nothing_listening_is_an_os_error(tmp_path: Path) -> None:
    """A socket path nobody listens on fails at once with an OSError, which the front answers 502."""

    async def go() -> None:
        with pytest.raises(OSError):
            await open_reply(str(tmp_path / "none.sock"), "/v1/x", b"{}", {})

    asyncio.run(go())
