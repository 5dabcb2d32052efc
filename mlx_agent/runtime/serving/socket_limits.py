"""How the wrapped worker reads a request off its socket: the front's body cap, and deadlines for the rest.

Only the worker's front can open its socket, and the front forwards only what passed its own limits; these
bound what reaches the worker anyway (a 50 MB body once took a worker to 9.8 GB, a client that stops
sending once held a handler thread for ever). The values are the front's: the plan's ``front`` record gives its
``max_body_bytes``, ``header_timeout`` and ``body_timeout`` to the worker's contract (``from_contract``):

* a body over ``max_body_bytes`` (by its Content-Length) is answered 413 ``body_too_large`` unread;
* the request line and headers must arrive within ``header_timeout`` of the connection's start (or of the
  request's, after a kept-alive one), and the body within ``body_timeout`` of the headers, however slowly
  they trickle in; past either the connection is closed (a body past its deadline is answered 408
  ``body_timeout`` first).

Stdlib and ``wire`` only: the entry reads the contract before mlx_lm is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlx_agent.wire import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_BODY_BYTES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.worker_contract import WorkerContract

# How long the worker may take to write a refusal to a client that stopped reading, before it closes.
REFUSAL_WRITE_S = 2.0


@dataclass(frozen=True)
class SocketLimits:
    """The worker's bounds on one request as read off its socket (module docstring)."""

    max_body_bytes: int = MAX_BODY_BYTES
    header_timeout: float = HEADER_TIMEOUT_S
    body_timeout: float = BODY_TIMEOUT_S


_current = SocketLimits()


def current() -> SocketLimits:
    """Return the limits this worker was started with (the front's defaults until ``configure``)."""
    return _current


def configure(limits: SocketLimits) -> None:
    """Set the limits every request of this worker is read under (once, at start)."""
    global _current
    _current = limits


def from_contract(contract: WorkerContract) -> SocketLimits:
    """Return the limits the plan gave the worker (the front's own)."""
    return SocketLimits(contract.max_body_bytes, contract.header_timeout, contract.body_timeout)
