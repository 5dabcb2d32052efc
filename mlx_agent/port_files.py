"""The files of one server's port, named once: plan, supervise and ``logs`` read every name from here.

A server on port P keeps its state beside its receipt in the serve receipts directory: ``P.json`` (the receipt),
``P.log`` (the front's log), ``P.lock`` (the lock confirm, stop, unload and policy take), ``P.front.json`` (the
front's config), ``P.token`` (its control token), ``P.policy.json`` (the policy it persists), ``P.sockets/`` (its
workers' sockets), and per model ``P.worker[-N].log``, ``P.worker[-N].hosts.json`` (a group's host list) and
``P.worker[-N].apc/`` (mlx-vlm's prefix cache on disk).
These names are on disk: receipts written by an earlier version must still be found, so they never change.

Standard library only, so any process may import it.
"""

from __future__ import annotations

from pathlib import Path

RECEIPT_SUFFIX = ".json"


def is_receipt_name(name: str) -> bool:
    """Say whether a file name in a serve receipts directory is a receipt (``P.json``, not ``P.front.json``)."""
    return name.endswith(RECEIPT_SUFFIX) and name[: -len(RECEIPT_SUFFIX)].isdigit()


class PortFiles:
    """Where the files of the server on ``port`` live, in the serve receipts directory ``directory``."""

    # A plain class, not a dataclass: ``serve status`` reads it, and dataclasses brings inspect, ast and dis
    # (tests/integration/test_cli_imports.py).
    __slots__ = ("directory", "port")

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port

    def _named(self, suffix: str) -> Path:
        return self.directory / f"{self.port}{suffix}"

    @property
    def receipt(self) -> Path:
        """The server's receipt."""
        return self._named(RECEIPT_SUFFIX)

    @property
    def log(self) -> Path:
        """The front's log (a unit's stdout and stderr too)."""
        return self._named(".log")

    @property
    def lock(self) -> Path:
        """The per-port lock file."""
        return self._named(".lock")

    @property
    def front_config(self) -> Path:
        """The config confirm writes for the front."""
        return self._named(".front.json")

    @property
    def token(self) -> Path:
        """The front's control token (0600)."""
        return self._named(".token")

    @property
    def policy(self) -> Path:
        """The policy the front persists after ``serve policy``."""
        return self._named(".policy.json")

    @property
    def sockets(self) -> Path:
        """The directory of the workers' sockets (when its path is short enough for AF_UNIX)."""
        return self._named(".sockets")

    def _worker_stem(self, index: int) -> str:
        return f"{self.port}.worker" if index == 0 else f"{self.port}.worker-{index}"

    def worker_log(self, index: int) -> Path:
        """Return the log of the ``index``-th model's worker (every load appends to it)."""
        return self.directory / f"{self._worker_stem(index)}.log"

    def worker_hosts(self, index: int) -> Path:
        """Return the reviewed host list of the ``index``-th model's group, written at confirm."""
        return self.directory / f"{self._worker_stem(index)}.hosts.json"

    def prefix_cache(self, index: int) -> Path:
        """Return the directory of the ``index``-th model's mlx-vlm prefix cache on disk (its worker creates it)."""
        return self.directory / f"{self._worker_stem(index)}.apc"

    @property
    def worker_log_glob(self) -> str:
        """The pattern (relative to ``directory``) every worker log of the port matches."""
        return f"{self.port}.worker*.log"

    def worker_logs(self) -> list[Path]:
        """Return the worker logs present, in name order (for a port whose receipt is gone)."""
        return sorted(self.directory.glob(self.worker_log_glob))
