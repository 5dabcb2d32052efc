"""mlx_lm.server, wrapped: the model loads before the port opens, and requests get what mlx_lm lacks.

mlx_lm's ``/health`` answers ``ok`` as soon as it listens, while the model still loads in its generation
thread. Our ``run`` (mlx_lm's ``run`` ignores its ``handler_class`` argument, so we replace ``run``) loads the
default model first, then serves with our generator and handler: once the port accepts connections, the
model is loaded, and a readiness probe of ``/health`` means "loaded and answering".

What the wrapper adds (structured output, reply limits, disconnect cancellation, honest errors, kept and
lenient tool calls, Harmony channels, template kwargs) is described in docs/wrapped-server.md; the seams it uses
are in ``seams``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socketserver
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mlx_lm.server as server

from mlx_agent.errors import SeamChanged
from mlx_agent.runtime.accel_entry import AccelFlags, prepare
from mlx_agent.runtime.limits import Limits, split_server_flags
from mlx_agent.runtime.seams import check_seams, warn_if_untested
from mlx_agent.wire import CONTEXT_WINDOW_FLAG, SOCKET_FLAG

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listening:
    """Where the worker listens and what its front told it: a Unix socket (else mlx_lm's host and port)."""

    socket: str | None = None
    context_window: int | None = None


def split_front_flags(argv: list[str]) -> tuple[Listening, list[str]]:
    """Take the front's flags (its socket, the model's context window) out of ``argv``."""
    socket_path: str | None = None
    window: int | None = None
    rest: list[str] = []
    words = iter(argv)
    for word in words:
        if word == SOCKET_FLAG:
            socket_path = next(words, None)
        elif word == CONTEXT_WINDOW_FLAG:
            window = int(next(words, "0")) or None
        else:
            rest.append(word)
    return Listening(socket_path, window), rest


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """mlx_lm's threading HTTP server, on a Unix socket only its owner can open (0600 in a 0700 directory)."""

    daemon_threads = True
    allow_reuse_address = False
    # A full Unix-socket backlog refuses a connect at once (TCP would retry), so make room for a burst of
    # requests arriving together at a front.
    request_queue_size = 256

    def server_bind(self) -> None:
        """Bind a fresh socket, private to this user, then listen."""
        path = str(self.server_address)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        previous = os.umask(0o177)
        try:
            super().server_bind()
        finally:
            os.umask(previous)


def serve_unix(path: str, generator: Any, handler_class: Any) -> None:
    """Serve mlx_lm's HTTP on the Unix socket ``path`` until interrupted, as ``_run_http_server`` does on TCP."""
    fingerprint = server.get_system_fingerprint()  # type: ignore[no-untyped-call]
    httpd = UnixHTTPServer(
        path, lambda *args, **kwargs: handler_class(generator, *args, system_fingerprint=fingerprint, **kwargs)
    )
    logging.info("mlx-agent: listening on unix socket %s", path)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        httpd.shutdown()
        generator.stop_and_join()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def serving_run(
    limit_defaults: Limits, accel: AccelFlags | None = None, listening: Listening | None = None
) -> Callable[..., None]:
    """Return the replacement for ``mlx_lm.server.run``: load, accelerate if asked, then serve with our classes."""
    from mlx_agent.runtime.generator import WrappedGenerator
    from mlx_agent.runtime.handler import WrappedHandler

    where = listening or Listening()

    def run(host: str, port: int, model_provider: Any, *_: Any, **__: Any) -> None:
        started = time.monotonic()
        logging.info("mlx-agent: loading %s before listening", model_provider.cli_args.model)
        model_provider.load_default()
        # Arrays left lazy here (LoRA layers, a draft model) would belong to this thread's stream, and the
        # generation thread could not evaluate them ("There is no Stream(cpu, 0) in current thread").
        import mlx.core as mx

        mx.eval([m.parameters() for m in (model_provider.model, model_provider.draft_model) if m is not None])
        prompt_lookup = prepare(model_provider, accel) if accel is not None else None
        logging.info("mlx-agent: model loaded in %.2f s", time.monotonic() - started)
        warn_if_untested()
        from mlx_agent.runtime.prompt_cache import AlignedPromptCache

        prompt_cache = AlignedPromptCache(model_provider.cli_args.prompt_cache_size)
        generator = WrappedGenerator(model_provider, prompt_cache, limit_defaults, prompt_lookup, where.context_window)
        if where.socket is not None:
            serve_unix(where.socket, generator, WrappedHandler)
        else:
            server._run_http_server(host, port, generator, handler_class=WrappedHandler)

    return run


def install(limit_defaults: Limits, accel: AccelFlags | None = None, listening: Listening | None = None) -> None:
    """Replace the module-level seams of mlx_lm.server with the wrapper's."""
    from mlx_agent.runtime import harmony_serving, lenient_tools
    from mlx_agent.runtime.generator import with_watcher
    from mlx_agent.runtime.tool_calls import KeepingToolCallFormatter

    server.run = serving_run(limit_defaults, accel, listening)
    server._make_logits_processors = with_watcher(server._make_logits_processors)
    server.ToolCallFormatter = KeepingToolCallFormatter  # type: ignore[misc]  # replacing the class is the seam
    server.scan_cache_dir = tolerant_scan(server.scan_cache_dir)  # type: ignore[attr-defined]
    harmony_serving.install()
    lenient_tools.install()


def tolerant_scan(scan: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``scan_cache_dir`` so that /v1/models lists the served model when no hub cache exists yet.

    Upstream lets ``CacheNotFound`` escape after answering 200, and the client gets an empty reply.
    """
    from types import SimpleNamespace

    from huggingface_hub.errors import CacheNotFound

    def scan_cache_dir(*args: Any, **kwargs: Any) -> Any:
        try:
            return scan(*args, **kwargs)
        except CacheNotFound:
            return SimpleNamespace(repos=())  # the handler reads only .repos

    return scan_cache_dir


def serve(argv: list[str], accel: AccelFlags | None = None) -> int:
    """Run mlx_lm.server's own ``main`` with ``argv`` (less our flags), wrapped; return the exit status."""
    try:
        check_seams()
    except SeamChanged as error:
        print(f"mlx-agent: cannot wrap this mlx_lm: {error}", file=sys.stderr)
        return 2
    limit_defaults, rest = split_server_flags(argv)
    listening, rest = split_front_flags(rest)
    install(limit_defaults, accel, listening)
    sys.argv = ["mlx_lm.server", *rest]
    upstream_main: Callable[[], None] = server.main  # untyped upstream
    upstream_main()
    return 0
