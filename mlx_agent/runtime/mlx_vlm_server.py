"""mlx_vlm.server, wrapped only to listen on the Unix socket its front gives it: no port in any argv.

mlx_vlm's CLI ends in ``uvicorn.run(app, host=..., port=...)``. We bind a socket private to this user (0600,
inside the front's 0700 directory) before that, and hand uvicorn its descriptor instead of a host and port:
uvicorn's own ``uds=`` would widen the socket to 0666. uvicorn listens on it only after mlx_vlm's lifespan
has loaded the model, so a connection that succeeds means the model is loaded. Everything else is
mlx_vlm's own server, unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from typing import Any

from mlx_agent.wire import SOCKET_FLAG


def bind_private(path: str) -> socket.socket:
    """Return a Unix socket bound at ``path`` that only its owner can connect to (not yet listening)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(previous)
    sock.set_inheritable(False)
    return sock


def serve(argv: list[str]) -> int:
    """Run mlx_vlm's server on the socket named by ``--mlx-agent-socket`` in ``argv``."""
    parser = argparse.ArgumentParser(prog="mlx_agent.runtime mlx-vlm", add_help=False)
    parser.add_argument(SOCKET_FLAG, dest="socket", required=True)
    ours, native = parser.parse_known_args(argv)
    sock = bind_private(ours.socket)

    import uvicorn
    from mlx_vlm.server import cli

    def run_on_socket(app: Any, **kwargs: Any) -> None:
        kwargs.pop("host", None)
        kwargs.pop("port", None)
        previous_run(app, fd=sock.fileno(), **kwargs)

    previous_run = uvicorn.run
    uvicorn.run = run_on_socket  # the seam: mlx_vlm's CLI calls uvicorn.run
    sys.argv = ["mlx_vlm.server", *native]
    try:
        cli.main()  # type: ignore[no-untyped-call]
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ours.socket)
    return 0
