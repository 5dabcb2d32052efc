"""What a request that names a URL or a path would touch, watched: a loopback listener and another user's file.

``Listener`` accepts on 127.0.0.1 and counts every connection (a fetch of any URL it names). ``SecretFile`` is a
0600 file owned by ``nobody`` that the tests (run as root) could read, watched by inotify for any open or read
(``touched``), so a worker that opened it is seen even when its answer hides it. The ``*_png`` builders are the
images the front accepts by their header but no worker can decode.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import os
import select
import socket
import struct
import threading
import zlib
from pathlib import Path

IN_ACCESS = 0x00000001
IN_OPEN = 0x00000020
NOBODY = 65534


class Listener:
    """A TCP listener on loopback that counts the connections made to it (accepting and closing each).

    A thread accepts as connections come, so a client that connects is not left waiting; ``connections`` also
    takes what the kernel has queued, so a connection made before a reply was sent is counted when it is read.
    """

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self._count = 0
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """Return the port it listens on."""
        port: int = self.sock.getsockname()[1]
        return port

    @property
    def connections(self) -> int:
        """Return how many connections were made so far, queued ones included."""
        with self._lock:
            self._drain()
            return self._count

    def url(self, path: str, scheme: str = "http") -> str:
        """Return a URL on this listener."""
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def _drain(self) -> None:
        while not self._closed and select.select([self.sock], [], [], 0)[0]:
            conn, _ = self.sock.accept()
            conn.close()
            self._count += 1

    def _serve(self) -> None:
        while not self._closed:
            try:
                select.select([self.sock], [], [], 0.2)  # a poll, so close() is seen
                with self._lock:
                    self._drain()
            except (OSError, ValueError):
                return

    def close(self) -> None:
        """Stop listening."""
        with self._lock:
            self._closed = True
            self.sock.close()


class SecretFile:
    """A 0600 file of ``nobody``'s under ``directory``, with an inotify watch for any open or read of it."""

    def __init__(self, directory: Path, name: str = "secret.mp4") -> None:
        self.path = directory / name
        self.path.write_bytes(b"the secret of another user\n")
        os.chmod(self.path, 0o600)
        os.chown(self.path, NOBODY, NOBODY)
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, str(self.path).encode(), IN_OPEN | IN_ACCESS) < 0:
            raise OSError(ctypes.get_errno(), "inotify")
        self.events = 0

    def touched(self) -> bool:
        """Say whether anything opened or read the file since the last call (or the watch began)."""
        seen = 0
        while True:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                self.events += seen
                return seen > 0
            seen += len(data) // 16  # a struct inotify_event with no name is 16 bytes

    def close(self) -> None:
        """End the watch."""
        os.close(self.fd)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(width: int, height: int, idat: bytes) -> bytes:
    header = _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def lying_png() -> bytes:
    """Return a 68-byte PNG whose header claims 7680x4320 pixels (the most the front takes) and holds 11 bytes."""
    data = _png(7680, 4320, zlib.compress(b"\x00" * 64)[:11])
    assert len(data) == 68
    return data


def thin_png() -> bytes:
    """Return a whole, valid 4000x1 PNG (mlx-vlm's Qwen processors refuse an aspect ratio of 200 or more)."""
    return _png(4000, 1, zlib.compress(b"\x00" + b"\x10\x20\x30" * 4000))


def truncated_png() -> bytes:
    """Return a 4000x3000 (12 MP) PNG cut in the middle of its pixel data (its IDAT chunk's CRC still right)."""
    rows = b"".join(b"\x00" + bytes((y % 256, 0, 0)) * 4000 for y in range(3000))
    data = zlib.compress(rows, 1)
    return _png(4000, 3000, data[: len(data) // 2])


def png(width: int = 32, height: int = 24) -> str:
    """Return a small solid-red PNG as a data URL."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    body = (
        chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
    return "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + body).decode()


class Traps:
    """A loopback listener and a 0600 file of ``nobody``'s, watched for a module (tests/e2e/conftest.py: ``traps``)."""

    def __init__(self, directory: Path) -> None:
        self.listener = Listener()
        self.secret = SecretFile(directory)

    def close(self) -> None:
        """Stop listening and watching."""
        self.listener.close()
        self.secret.close()
