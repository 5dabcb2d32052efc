"""Every wrapped entry's first step: split its argv once into the plan's contract, the front's flags and the rest.

A contract that is not the record (a worker started by hand, or by another version's plan) is refused with one
``mlx-agent-error`` line (``invalid_arguments``) before anything loads.
"""

from __future__ import annotations

from mlx_agent.errors import InvalidArguments, exit_refused
from mlx_agent.worker_contract import ContractInvalid, Started, split_worker_argv


def started(argv: list[str], *, socket: bool = False) -> tuple[Started, list[str]]:
    """Return what the plan and the front gave the worker, and the runtime's own argv; refuse a bad contract.

    ``socket``: the entry serves only on its front's socket, so the socket flag is required.
    """
    try:
        given, rest = split_worker_argv(argv)
    except ContractInvalid as error:
        exit_refused(InvalidArguments(str(error)))
    if socket and given.socket is None:
        exit_refused(InvalidArguments("this worker serves only on its front's socket: --mlx-agent-socket is required"))
    return given, rest
