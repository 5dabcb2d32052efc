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
import errno
import logging
import os
import signal
import socket
import socketserver
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import mlx_lm.server as server

from mlx_agent.errors import LaunchFailed, MlxAgentError, PortInUse, SeamChanged, exit_refused, print_refusal
from mlx_agent.runtime.distributed.group import launched_rank
from mlx_agent.runtime.entries.accel_entry import AccelFlags, accel_flags, prepare
from mlx_agent.runtime.entries.file_checks import refuse_if_model_changed
from mlx_agent.runtime.entries.seams import check_seams, warn_if_untested
from mlx_agent.runtime.serving import limits
from mlx_agent.runtime.serving.limits import Limits
from mlx_agent.wire import EXIT_REFUSED
from mlx_agent.worker_contract import Started

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Listening:
    """Where the worker listens and what its front told it: a Unix socket (else mlx_lm's host and port)."""

    socket: str | None = None
    context_window: int | None = None
    prompt_cache_dir: str | None = None  # where entries are restored from and saved to (named by the identity)
    prompt_cache_disk_gb: float = 0.0  # what every saved entry of the home may take together (given with the dir)


def listening(given: Started) -> Listening:
    """Return where the worker listens and what it keeps: the front's socket and cache directory, the rest planned."""
    contract = given.contract
    return Listening(given.socket, contract.context_window, given.prompt_cache_dir, contract.prompt_cache_disk_gb)


def _interrupt(*_: Any) -> None:
    """TERM from the front (unload, eviction, stop): end serving as Ctrl-C would, so the cache can be saved."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM must not cut the save short
    raise KeyboardInterrupt


def restore_prompt_cache(where: Listening, store: Any, model_key: Any, model_provider: Any) -> None:
    """Restore the entries a previous worker of this identity saved, before serving; never fail the start.

    The generation thread already runs (and is no daemon): whatever escaped here would leave a process that
    never listens, so the worker starts without the kept cache instead.
    """
    if where.prompt_cache_dir is None:
        return
    from pathlib import Path

    from mlx_agent.runtime.serving.prompt_cache import fit_to_disk, probe_layout, restore_entries

    directory = Path(where.prompt_cache_dir)
    with contextlib.suppress(OSError):  # the disk may have shrunk since the last save: the limit shrinks with it
        fit_to_disk(directory.parent, int(where.prompt_cache_disk_gb * 1e9))
    args = model_provider.cli_args
    kv_bits = getattr(args, "kv_bits", None)
    quantized = None if kv_bits is None else (int(getattr(args, "kv_group_size", 64)), int(kv_bits))
    models = [m for m in (model_provider.model, model_provider.draft_model) if m is not None]
    try:
        result = restore_entries(store, model_key, directory, directory.name, probe_layout(models, quantized))
    except Exception:
        logging.exception("mlx-agent: starting without the kept prompt cache: its restore failed")
    else:
        logging.info(
            "mlx-agent: restored %d saved prompt cache entries (%d quarantined)",
            result.restored,
            len(result.quarantined),
        )
    signal.signal(signal.SIGTERM, _interrupt)


def save_prompt_cache(where: Listening, store: Any, model_key: Any) -> None:
    """Save the entries still held, then keep the home's saved entries within the limit."""
    if where.prompt_cache_dir is None:
        return
    from pathlib import Path

    from mlx_agent.runtime.serving.prompt_cache import keep_entries

    directory = Path(where.prompt_cache_dir)
    started = time.monotonic()
    result = keep_entries(store, model_key, directory, int(where.prompt_cache_disk_gb * 1e9))
    logging.info(
        "mlx-agent: saved %d prompt cache entries in %.2f s (%d skipped at the free-space floor, %d failed)",
        result.saved,
        time.monotonic() - started,
        result.skipped,
        result.failed,
    )


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


class UnixListener:
    """Rank 0's Unix socket, bound before the model loads (a bad path fails at once) and listening after it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.httpd = UnixHTTPServer(path, _not_yet, bind_and_activate=False)
        try:
            self.httpd.server_bind()
        except OSError as error:
            self.httpd.server_close()
            refuse_listening(path, error)

    def serve(self, generator: Any, handler_class: Any) -> None:
        """Listen, and serve mlx_lm's HTTP until interrupted, as ``_run_http_server`` does on TCP."""
        fingerprint = server.get_system_fingerprint()  # type: ignore[no-untyped-call]
        self.httpd.RequestHandlerClass = lambda *args, **kwargs: handler_class(
            generator, *args, system_fingerprint=fingerprint, **kwargs
        )
        self.httpd.server_activate()
        logging.info("mlx-agent: listening on unix socket %s", self.path)
        try:
            self.httpd.serve_forever()
        except KeyboardInterrupt:
            self.httpd.server_close()
            generator.stop_and_join()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


def _not_yet(*_: Any) -> Any:
    raise RuntimeError("the worker accepts no connection before it listens")


def serve_tcp(host: str, port: int, generator: Any, handler_class: Any) -> None:
    """Serve on mlx_lm's own TCP server; a port it cannot bind ends the process (the generation thread would not)."""
    try:
        server._run_http_server(host, port, generator, handler_class=handler_class)
    except OSError as error:
        refuse_listening(f"{host}:{port}", error, at_once=True)


def refuse_listening(where: str, error: OSError, at_once: bool = False) -> NoReturn:
    """Exit with a refusal: rank 0 cannot serve HTTP, so neither can its group (the launcher stops the others).

    ``at_once`` once mlx_lm's generation thread runs: it is not a daemon, and would keep the process alive.
    """
    message = f"cannot listen on {where}: {error.strerror or error}"
    cause: MlxAgentError = (
        PortInUse(message, details={"address": where})
        if error.errno == errno.EADDRINUSE
        else LaunchFailed(message, details={"address": where})
    )
    logging.error("mlx-agent: %s", message)
    if at_once:
        print_refusal(cause)
        os._exit(EXIT_REFUSED)
    exit_refused(cause)


def serving_run(
    limit_defaults: Limits, accel: AccelFlags | None = None, listening: Listening | None = None
) -> Callable[..., None]:
    """Return the replacement for ``mlx_lm.server.run``: load, accelerate if asked, then serve with our classes.

    In a group (mlx.launch), only rank 0 binds and serves HTTP, after every rank has loaded; the others follow
    its generation loop (``distributed/group.py``).
    """
    from mlx_agent.runtime.distributed import group
    from mlx_agent.runtime.serving.generator import WrappedGenerator
    from mlx_agent.runtime.serving.handler import WrappedHandler
    from mlx_agent.runtime.serving.progress import board

    where = listening or Listening()

    def run(host: str, port: int, model_provider: Any, *_: Any, **__: Any) -> None:
        rank, size = group.world()
        if size > 1:
            group.check_group_seams()
            group.refuse_unsupported(model_provider.cli_args, accel)
            group.watch_launcher(rank)
            group.report_load(rank)  # rank 0's share of the weights read in parts (progress.py)
        listener = UnixListener(where.socket) if rank == 0 and where.socket is not None else None
        started = time.monotonic()
        logging.info("mlx-agent: loading %s before listening", model_provider.cli_args.model)
        model_provider.load_default()
        # Arrays left lazy here (LoRA layers, a draft model) would belong to this thread's stream, and the
        # generation thread could not evaluate them ("There is no Stream(cpu, 0) in current thread").
        import mlx.core as mx

        mx.eval([m.parameters() for m in (model_provider.model, model_provider.draft_model) if m is not None])
        if rank == 0:  # the rank the front talks to; in a group the others' files would be the same one
            board().load_end()
        prompt_lookup = prepare(model_provider, accel) if accel is not None else None
        logging.info("mlx-agent: model loaded in %.2f s", time.monotonic() - started)
        if size > 1:
            group.barrier(rank, size)  # before any generation thread exists: its collectives come after
        warn_if_untested()
        from mlx_agent.runtime.serving.prompt_cache import AlignedPromptCache

        prompt_cache = AlignedPromptCache(model_provider.cli_args.prompt_cache_size)
        generator_class = group.DistributedGenerator if size > 1 else WrappedGenerator
        generator = generator_class(model_provider, prompt_cache, limit_defaults, prompt_lookup, where.context_window)
        if rank != 0:
            group.follow(generator, rank)
        keeps = size == 1  # a group's ranks would each save a part: its prompt cache is not kept
        model_key = getattr(model_provider, "model_key", None)  # stopping the generator forgets it
        if keeps:
            restore_prompt_cache(where, prompt_cache, model_key, model_provider)
        if listener is not None:
            listener.serve(generator, WrappedHandler)
        else:
            serve_tcp(host, port, generator, WrappedHandler)
        if keeps:
            save_prompt_cache(where, prompt_cache, model_key)

    return run


def install(limit_defaults: Limits, accel: AccelFlags | None = None, listening: Listening | None = None) -> None:
    """Replace the module-level seams of mlx_lm.server with the wrapper's."""
    from mlx_agent.runtime.reply import family_parsers, harmony_serving, lenient_tools
    from mlx_agent.runtime.reply.tool_calls import KeepingToolCallFormatter
    from mlx_agent.runtime.serving import chunked_prefill
    from mlx_agent.runtime.serving.generator import with_watcher
    from mlx_agent.runtime.serving.progress import loading

    server.run = serving_run(limit_defaults, accel, listening)
    server.load = loading(server.load)  # type: ignore[attr-defined]  # weights read in parts, each counted (progress.py)
    server._make_logits_processors = with_watcher(server._make_logits_processors)
    server.ToolCallFormatter = KeepingToolCallFormatter  # type: ignore[misc]  # replacing the class is the seam
    server.scan_cache_dir = tolerant_scan(server.scan_cache_dir)  # type: ignore[attr-defined]
    harmony_serving.install()
    lenient_tools.install()
    family_parsers.install()  # our parsers through mlx_lm's own selection, and its readers' fixes
    chunked_prefill.install()  # long prompts prefill beside the batch's decoding


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


def serve(argv: list[str], given: Started, accel: AccelFlags | None = None) -> int:
    """Run mlx_lm.server's own ``main`` with ``argv`` (mlx_lm's own), wrapped as ``given`` says; return the status."""
    try:
        check_seams()
    except SeamChanged as error:
        print(f"mlx-agent: cannot wrap this mlx_lm: {error}", file=sys.stderr)
        return 2
    # Each rank rechecks its own host's copy before it joins the group (docs/distributed.md).
    refuse_if_model_changed(given.contract.model_checks, launched_rank(), socket.gethostname())
    install(limits.from_contract(given.contract), accel or accel_flags(given.contract), listening(given))
    sys.argv = ["mlx_lm.server", *argv]
    upstream_main: Callable[[], None] = server.main  # untyped upstream
    upstream_main()
    return 0
