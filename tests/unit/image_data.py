"""Image data for the gateway tests: a PNG maker and a small PNG as bytes, base64 and a data URL."""

from __future__ import annotations

import base64
import struct
import zlib


def png_bytes(width: int, height: int, *, pixels: bool = True) -> bytes:
    """Return a solid PNG of ``width`` x ``height`` (with ``pixels=False``, a valid header and no image data)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x10\x20\x30" * width for _ in range(height)) if pixels else b""
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG = png_bytes(4, 3)
PNG_B64 = base64.b64encode(PNG).decode()
PNG_URL = "data:image/png;base64," + PNG_B64
