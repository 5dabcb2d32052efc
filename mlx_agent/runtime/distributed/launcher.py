"""MLX's own launcher, fit to be supervised: ``python -m mlx_agent.runtime.distributed.launcher [mlx.launch args]``.

It is mlx.launch (``mlx._distributed_utils.launch.main``, same arguments, same hostfiles and backends), with
six of its behaviours changed through named seams (``SEAMS``, checked at start):

* **A secret per launch.** Each launch draws a fresh secret and writes it, hex, as the first line of every
  rank's stdin (a pipe to a local rank; ssh's channel to a remote one, after the rank's shell has turned its
  terminal's echo off: the line goes once mlx.launch's script has printed its pid file), and sets
  ``wire.RING_AUTH_ENV`` in the ranks' environment, so each rank proves the secret to its peers before any
  model data crosses the ring (``distributed/handshake.py``). Never argv or ``--env``: others read those.

* **Idle CPU.** mlx.launch's output forwarder passes every rank's stdin pipe to ``select`` as a descriptor to
  write, and an empty pipe is always writable, so each rank's forwarding thread spins: about 0.7 core while the
  ranks sleep. With its own stdin at /dev/null, its main loop spins as well (always readable, reads nothing).
  A server needs no stdin: here ``select`` never watches stdin, either way, and waits for output only.
* **Exit status.** mlx.launch exits 0 whatever its ranks did. This exits with the status of the rank that
  failed first (a refusal before a rank that merely lost its group, 128+N for a signal), 0 only if all ranks
  exited 0. mlx.launch already stops the other ranks once one exits non-zero.
* **Signals.** mlx.launch dies alone on SIGTERM, SIGINT or SIGHUP and leaves its ranks running. Here they stop
  every rank (mlx.launch's own terminate: the local process, or the remote one through ssh), then it exits.
* **Temp files.** mlx.launch's script writes each rank's hosts file in the temp folder and nothing removes it, so
  every start whose ring never formed (a refusal, a peer that failed its proof) left one behind. A local rank's
  files are written here instead, the same way (``launch_files.write_launch_files``), and removed once it ended,
  with its pid file. A rank that cannot start (its files, its process) fails the group's status.
* **Stopping a local rank.** mlx.launch terminates and reaps it, then runs its kill script, which signals the pid
  in the rank's pid file if a process has it: by then another's. Here a local rank is terminated and reaped
  only; a remote one still through its kill script over ssh.

A rank whose launcher dies anyway (SIGKILL) exits by itself (``distributed.watch_launcher``).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import Any

from mlx_agent.runtime.distributed.launch_files import remove_launch_files, remove_mktemp_file, write_launch_files
from mlx_agent.wire import EXIT_GENERATION_DIED, EXIT_MODEL_CHANGED, EXIT_RANK_LOST, EXIT_REFUSED, RING_AUTH_ENV

SEAMS = ("main", "RemoteProcess", "select", "_launch_with_io")
LOCAL_HOST = "127.0.0.1"  # the host mlx.launch runs a rank of without ssh (checked: ``seams_changed``)
# RemoteProcess's methods, with the parameters RankProcess takes them by (in order) or overrides them with.
RANK_METHODS: dict[str, tuple[str, ...]] = {
    "__init__": ("self", "rank", "host", "python", "cwd", "files", "env", "command"),
    "make_launch_script": ("rank", "python", "cwd", "files", "env", "command", "is_local"),  # exports env first
    "preprocess_output": ("self", "data", "is_stdout"),
    "terminate": ("self",),
}
RANK_PROPERTIES = ("process", "exit_status")
RANK_ATTRIBUTES = ("_is_local", "_pidfile", "_process")  # set by RemoteProcess.__init__, read by RankProcess
# Statuses that follow from another rank's failure: the root cause is reported before them.
CONSEQUENCES = (EXIT_RANK_LOST, EXIT_GENERATION_DIED)
# Statuses that say why a rank refused to run; they are the group's status whatever else failed with them.
REFUSALS = (EXIT_REFUSED, EXIT_MODEL_CHANGED)


class Ranks:
    """The ranks' processes, and their exit statuses in the order they were seen."""

    def __init__(self) -> None:
        self.processes: list[Any] = []
        self.statuses: list[tuple[int, int, bool]] = []  # (rank, status, whether we stopped it)
        self.signalled: int | None = None  # the signal that told this launcher to stop its ranks, if one did
        self.secret = secrets.token_hex(32)  # this launch's: every rank proves it to its peers
        self.lock = threading.Lock()

    def exit_status(self) -> int:
        """Return the status to exit with: the first failure that is not a consequence of another, else 0."""
        with self.lock:
            failures = [(status, stopped) for _, status, stopped in self.statuses if status != 0]
        causes = [status for status, stopped in failures if not stopped and status not in CONSEQUENCES]
        # A refusal (a bind failure, a changed model) explains a peer's plain failure, whichever ended first:
        # a rank still joining the group fails with status 1 when its peer refused and left. It counts even
        # for a rank we were stopping after that failure (its exit raced our stop; stopping never gives it),
        # but not when a signal stopped the group (a handshake cut short refuses too).
        refusals = [
            status for status, stopped in failures if status in REFUSALS and (not stopped or self.signalled is None)
        ]
        # Told to stop, the launcher ends as the signal says: a rank that lost its peer to the stop (it may be
        # seen to exit first) is a consequence of it, never the reason.
        signalled = [128 + self.signalled] if self.signalled is not None else []
        chosen = refusals or causes or signalled or [status for status, _ in failures]
        return chosen[0] if chosen else 0

    def stop_all(self) -> None:
        """Terminate every rank still running."""
        for process in list(self.processes):
            process.terminate()


RANKS = Ranks()


def quiet_select(rlist: list[int], wlist: list[int], xlist: list[int], timeout: float | None) -> Any:
    """``select`` for mlx.launch's forwarder: never stdin (ours or a rank's), so an idle group costs nothing."""
    stdin = sys.stdin.fileno()
    readable = [fd for fd in rlist if fd != stdin]
    if not readable:
        time.sleep(timeout or 0)
        return [], [], []
    return select.select(readable, [], xlist, timeout)


def local_launch_files(rank: int, files: dict[str, str]) -> dict[str, str]:
    """Write a local rank's launch files (``write_launch_files``); none if that fails: its script writes them."""
    try:
        return write_launch_files(files)
    except OSError as exc:  # a full temp folder, say: mlx.launch's own way then, which fails the rank as it can
        print(f"mlx-agent launcher: rank {rank}: cannot write its launch files: {exc}", file=sys.stderr, flush=True)
        return {}


def rank_process_class(base: Any) -> Any:
    """Return mlx.launch's ``RemoteProcess`` recording its rank's exit status, and terminating only once."""

    class RankProcess(base):  # type: ignore[misc]
        def __init__(
            self, rank: int, host: str, python: Any, cwd: Any, files: dict[str, str], env: list[str], command: Any
        ) -> None:
            self.launch_files: dict[str, str] = {}
            try:
                if host == LOCAL_HOST and files:  # mlx.launch's test for a rank it runs here (no ssh)
                    self.launch_files = local_launch_files(rank, files)
                if self.launch_files:
                    files, env = {}, [*env, *(f"{name}={path}" for name, path in self.launch_files.items())]
                super().__init__(rank, host, python, cwd, files, env, command)
            except BaseException as exc:
                # mlx.launch's forwarding thread dies of it without a status: the group must not exit 0.
                remove_launch_files(self.launch_files.values())
                with RANKS.lock:
                    RANKS.statuses.append((rank, 1, False))
                print(f"mlx-agent launcher: rank {rank} could not start: {exc}", file=sys.stderr, flush=True)
                raise
            self.rank = rank
            self.recorded = False
            self.stopped = False
            self.stopping = threading.Lock()
            self.secret_sent = False
            RANKS.processes.append(self)

        def preprocess_output(self, data: str, is_stdout: bool = False) -> Any:
            out = super().preprocess_output(data, is_stdout)
            if not self.secret_sent and self._pidfile is not None:  # the shell printed it after `stty -echo`
                self.secret_sent = True
                with contextlib.suppress(OSError):  # a rank already gone fails its group anyway
                    os.write(self.process.stdin.fileno(), RANKS.secret.encode() + b"\n")
            return out

        @property
        def exit_status(self) -> Any:
            status = super().exit_status
            code, killed = status
            if code is not None and not self.recorded:
                self.recorded = True
                with RANKS.lock:
                    RANKS.statuses.append((self.rank, 128 - code if code < 0 else code, self.stopped or killed))
                self.remove_files()
            return status

        def terminate(self) -> None:
            # Both the forwarding thread (once another rank failed) and a signal handler may call this.
            with self.stopping:
                if not self.stopped and self.process.poll() is None:
                    self.stopped = True
                    if self._is_local:
                        # The rank is our child (its shell exec'd it): stopped and reaped here. mlx.launch's
                        # kill script would then signal the pid in its pid file, which may be another's by then.
                        self.process.terminate()
                        self.process.wait()
                    else:
                        # Its kill script fails when the rank never wrote its pid file: nothing is left to stop.
                        with contextlib.suppress(subprocess.CalledProcessError):
                            super().terminate()
                if self.process.poll() is not None:  # never while it may still read them
                    self.remove_files()

        def remove_files(self) -> None:
            """Remove what this rank's start wrote here, once it has exited: its launch files and pid file."""
            if self._is_local:  # a remote rank's pid file is on its host, removed by its kill script
                remove_mktemp_file(self._pidfile)
            remove_launch_files(self.launch_files.values())

    return RankProcess


def seams_changed(upstream: Any) -> str | None:
    """Say how mlx.launch's module ``upstream`` differs from the seams this launcher patches, if it does."""
    missing = [name for name in SEAMS if not hasattr(upstream, name)]
    if missing:
        return f"has no {', '.join(missing)}"
    process = upstream.RemoteProcess
    missing = [f"RemoteProcess.{name}" for name in (*RANK_METHODS, *RANK_PROPERTIES) if not hasattr(process, name)]
    if missing:
        return f"has no {', '.join(missing)}"
    for name, expected in RANK_METHODS.items():
        parameters = tuple(inspect.signature(getattr(process, name)).parameters)
        if parameters != expected:
            return f"takes RemoteProcess.{name}({', '.join(parameters)}), not ({', '.join(expected)})"
    init = getattr(process.__init__, "__code__", None)
    names, constants = (init.co_names, init.co_consts) if init is not None else ((), ())
    unset = [name for name in RANK_ATTRIBUTES if name not in names]
    if unset:
        return f"no longer sets RemoteProcess's {', '.join(unset)}"
    if LOCAL_HOST not in constants:
        return f"no longer runs a rank on {LOCAL_HOST} without ssh"
    return None


def _on_signal(signum: int, _: FrameType | None) -> None:
    RANKS.signalled = RANKS.signalled or signum
    print(f"mlx-agent launcher: signal {signum}; stopping every rank", file=sys.stderr, flush=True)
    threading.Thread(target=RANKS.stop_all, name="mlx-agent-stop-ranks", daemon=True).start()


def main(argv: list[str]) -> int:
    """Run mlx.launch with ``argv`` (its own arguments); return the exit status (module docstring)."""
    upstream: Any = importlib.import_module("mlx._distributed_utils.launch")  # untyped, and patched below
    if changed := seams_changed(upstream):
        print(f"mlx-agent launcher: this mlx.launch {changed}", file=sys.stderr)
        return 2
    if sys.stdin is None or sys.stdin.closed:
        sys.stdin = open(os.devnull)  # noqa: SIM115  # kept open: mlx.launch makes its stdin non-blocking
    upstream.select = quiet_select
    upstream.RemoteProcess = rank_process_class(upstream.RemoteProcess)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _on_signal)
    sys.argv = ["mlx.launch", "--env", f"{RING_AUTH_ENV}=stdin", *argv]  # says where the secret is, not what
    upstream.main()
    status = RANKS.exit_status()
    for rank, code, stopped in RANKS.statuses:  # what a supervisor reads to say which rank ended the group
        if code != 0 and not stopped:
            print(f"mlx-agent launcher: rank {rank} exited with status {code}", file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
