"""The wrapped entry as one rank of a group that serves one model across hosts (mlx.launch; docs/distributed.md).

mlx_lm 0.32.2 serves a sharded model from every rank's generation loop in lockstep: rank 0 takes requests
from HTTP and shares each one (pickled, through ``all_sum``) with the others, which follow without HTTP.
Our entry keeps that loop and adds what a supervised group needs:

* **Only our ranks form the group**: before any collective each rank checks its links on this host and
  proves the launch's secret to the others (``handshake.py``); a stranger on a link ends the group.
* **Followers serve nothing**: only rank 0 binds the socket or port; the others run the generation loop
  (``follow``). Readiness means every rank has loaded: a ``barrier`` after the load, before rank 0 listens.
  Rank 0 alone reports its load's progress, of its own share of the weights (``report_load``).
* **Requests cross ranks**: a ``WrappedRequest`` carries its client's socket and its reply stream, which do not
  pickle; ``DistributedGenerator._share_request`` sends the request without them (rank 0 keeps its own).
* **Stopping an unbatched reply** (``seed``, ``--kv-bits``): mlx_lm raises ``NotImplementedError`` on rank 0
  alone when such a reply's client leaves, and the followers go on generating it, so the ranks' collectives
  no longer match and the group wedges for good (bare mlx_lm does the same). Here its context is a
  ``CollectiveStop``: every rank reads the stop together (an ``all_sum`` every ``STOP_SYNC_TOKENS`` tokens),
  so all ranks leave the reply at the same token and the next request is served at once. Batched replies
  already stop together (mlx_lm shares rank 0's list of stopped replies).
* **A lost group exits**: a peer that dies fails the next collective (the ring backend raises "connection to
  a peer was lost"), the generation thread dies, and the worker exits (``wire.EXIT_GENERATION_DIED``); a rank
  whose launcher went away exits with ``wire.EXIT_RANK_LOST`` (``watch_launcher``).
* **Quiet followers**: a follower waiting in a collective busy-polls in the ring backend (about one core while
  the group is idle: rank 0 polls its queue for 0.1 s between the idle loop's collectives). An idle follower
  sleeps for ``FOLLOWER_PAUSE`` of that poll first, and waits in the collective for the rest (about 0.1 core);
  a request that reaches an idle group waits up to 90 ms more for its first token.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from dataclasses import replace
from typing import Any, NoReturn

import mlx.core as mx
import mlx_lm.server as server

from mlx_agent.errors import InvalidArguments, SeamChanged, exit_refused
from mlx_agent.runtime.distributed.handshake import verify_group
from mlx_agent.runtime.entries.accel_entry import AccelFlags
from mlx_agent.runtime.serving import progress
from mlx_agent.runtime.serving.generator import WrappedGenerator, WrappedRequest
from mlx_agent.wire import EXIT_GENERATION_DIED, EXIT_RANK_LOST

log = logging.getLogger(__name__)

STOP_SYNC_TOKENS = 4  # how often (in tokens) the ranks of an unbatched reply agree on whether it stops
FOLLOWER_PAUSE = 0.9  # the share of rank 0's idle poll a follower sleeps before it joins the poll's collective
LAUNCHER_POLL_SECONDS = 0.5

# The methods of mlx_lm's generator this module overrides or calls (beyond runtime/entries/seams.py's).
SEAMS = ("_share_request", "_next_request", "_serve_single", "join")


def launched_rank() -> int:
    """Return this process's rank as its launcher told it (before the group is joined); 0 when not launched."""
    for name in ("MLX_RANK", "OMPI_COMM_WORLD_RANK"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


_VERIFIED: list[tuple[int, int]] = []  # the group this process verified (once: the secret is read once)


def world() -> tuple[int, int]:
    """Return (rank, size) of the group mlx_lm joined (size 1 when not distributed), its peers verified first.

    mlx_lm's ``ModelProvider`` formed the ring (``init`` sends nothing); before any collective, every link on
    this host and every rank's proof of the launch's secret are checked (``handshake.verify_group``).
    """
    if not _VERIFIED:
        group = mx.distributed.init()
        verify_group(group.rank(), group.size())
        _VERIFIED.append((group.rank(), group.size()))
    return _VERIFIED[0]


def refuse_unsupported(cli_args: Any, accel: AccelFlags | None) -> None:
    """Refuse, before anything loads, what a group cannot serve: an adapter, a draft model, lookup, the kernel."""
    asked = [
        name
        for name, on in (
            ("--adapter-path", cli_args.adapter_path is not None),
            ("--draft-model", cli_args.draft_model is not None),
            ("--prompt-lookup", accel is not None and accel.prompt_lookup),
            ("--m5-prefill", accel is not None and accel.m5_prefill),
        )
        if on
    ]
    if asked:
        exit_refused(
            InvalidArguments(
                f"{', '.join(asked)} cannot be served across ranks; serve the model in one process for these",
                details={"options": asked},
            )
        )


def check_group_seams() -> None:
    """Exit with status 2 (as ``seams.check_seams`` does) if mlx_lm's generator lacks a method used here."""
    missing = [name for name in SEAMS if not callable(getattr(server.ResponseGenerator, name, None))]
    if missing:
        error = SeamChanged(f"mlx_lm's ResponseGenerator no longer has {', '.join(missing)}")
        print(f"mlx-agent: cannot wrap this mlx_lm across ranks: {error}", file=sys.stderr, flush=True)
        sys.exit(2)


def report_load(rank: int) -> None:
    """On rank 0, read its share of the weights in parts and report them (``progress.sharded_loading``).

    Rank 0 is the rank the front talks to: its progress is its own weights read ÷ its own share, not the
    group's (the others load theirs at the same time, each from its own files).
    """
    module: Any = server  # where mlx_lm's ModelProvider looks sharded_load up
    code = getattr(getattr(module, "sharded_load", None), "__code__", None)
    if code is None or not {"eval", "parameters"} <= set(code.co_names):
        error = SeamChanged("mlx_lm's sharded_load no longer evaluates its model's parameters")
        print(f"mlx-agent: cannot wrap this mlx_lm across ranks: {error}", file=sys.stderr, flush=True)
        sys.exit(2)
    if rank == 0:
        module.sharded_load = progress.sharded_loading(module.sharded_load)


def barrier(rank: int, size: int) -> None:
    """Wait until every rank has loaded (an ``all_sum`` on a scalar); rank 0 listens only after this."""
    started = time.monotonic()
    total = mx.distributed.all_sum(mx.array(1.0), stream=mx.cpu)
    mx.eval(total)
    if total.item() != size:
        raise RuntimeError(f"the group's barrier counted {total.item()} ranks, not {size}")
    log.info(
        "mlx-agent: rank %d of %d on %s: every rank has loaded (waited %.2f s)",
        rank,
        size,
        socket.gethostname(),
        time.monotonic() - started,
    )


def watch_launcher(rank: int) -> None:
    """Exit with ``EXIT_RANK_LOST`` once this rank's parent (its launcher, or sshd's session) has gone.

    mlx.launch dies alone on SIGKILL, and a local rank would then live on as an orphan; polling the parent
    works on macOS and Linux alike (no PR_SET_PDEATHSIG there).
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(LAUNCHER_POLL_SECONDS)
        log.error("mlx-agent: rank %d lost its launcher (parent %d exited); exiting", rank, parent)
        os._exit(EXIT_RANK_LOST)

    threading.Thread(target=watch, name="mlx-agent-launcher-watch", daemon=True).start()


def follow(generator: WrappedGenerator, rank: int) -> NoReturn:
    """Run a follower: no HTTP, only mlx_lm's generation loop following rank 0; exit when it ends."""
    log.info("mlx-agent: rank %d on %s follows rank 0 (no HTTP here)", rank, socket.gethostname())
    generator.join()  # type: ignore[no-untyped-call]
    failed = not generator.generation_available()  # type: ignore[no-untyped-call]
    log.error("mlx-agent: rank %d: the generation loop ended (%s); exiting", rank, "failed" if failed else "stopped")
    os._exit(EXIT_GENERATION_DIED if failed else EXIT_RANK_LOST)


class CollectiveStop(server.GenerationContext):
    """An unbatched reply's context whose stop every rank reads together (module docstring).

    mlx_lm reads ``_should_stop`` once per token in every rank's loop, at the same token on each; every
    ``STOP_SYNC_TOKENS``-th read is an ``all_sum`` of the ranks' requests to stop (only rank 0's client can
    ask), on the generation thread's stream, after the step it has in flight, as mlx_lm's own collectives are.
    """

    _stop_requested: bool = False
    _reads: int = 0

    @property  # a dataclass field upstream, read in lockstep here
    def _should_stop(self) -> bool:
        self._reads += 1
        if self._reads % STOP_SYNC_TOKENS:
            return False
        votes = mx.distributed.all_sum(mx.array(int(self._stop_requested), dtype=mx.int32))
        return bool(votes.item())

    @_should_stop.setter
    def _should_stop(self, value: bool) -> None:
        self._stop_requested = bool(value)  # set by __init__ (False) and by stop() from the handler thread


class DistributedGenerator(WrappedGenerator):
    """Our generator on one rank of a group: requests pickle across ranks, unbatched replies stop together."""

    def _share_request(self, request: tuple[Any, Any, Any] | None) -> Any:
        """Share rank 0's request without its client socket and reply stream; rank 0 keeps its own."""
        if request is None:
            return super()._share_request(None)  # type: ignore[no-untyped-call]
        queue, wrapped, args = request
        portable = (
            replace(wrapped, connection=None, stream=None, watcher=None)
            if isinstance(wrapped, WrappedRequest)
            else wrapped
        )
        shared = super()._share_request((queue, portable, args))  # type: ignore[no-untyped-call]
        return None if shared is None else (queue, wrapped, args)

    def _next_request(self, timeout: float | None = None) -> Any:
        """Poll for the next request; an idle follower sleeps before the poll's collective (module docstring)."""
        if getattr(self, "_rank", 0) != 0 and timeout is not None:
            time.sleep(timeout * FOLLOWER_PAUSE)
        return super()._next_request(timeout)  # type: ignore[no-untyped-call]

    def _serve_single(self, request: tuple[Any, Any, Any], stream: Any) -> None:
        """Serve an unbatched reply whose stop every rank reads together.

        mlx_lm's ``_serve_single`` builds its context from the module's ``GenerationContext``; only this thread
        builds contexts, so the name is swapped for the call.
        """
        original = server.GenerationContext
        server.GenerationContext = CollectiveStop  # type: ignore[misc]
        try:
            super()._serve_single(request, stream)
        finally:
            server.GenerationContext = original  # type: ignore[misc]
