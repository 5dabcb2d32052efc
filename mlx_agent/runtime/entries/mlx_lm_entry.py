"""The mlx_lm worker's start: what changed since review is refused before mlx_lm is imported, then it serves.

The reviewed adapter files (``file_checks``) and the fingerprint of ``--prompt-lookup``/``--m5-prefill``
(``accel_entry``) are checked first and their flags taken out of argv, and so are the socket limits
(``socket_limits``: the front's body cap and read deadlines); ``mlx_lm_server`` then gets the runtime's own
arguments.
"""

from __future__ import annotations

from mlx_agent.runtime.entries.accel_entry import refuse_if_changed as refuse_if_runtime_changed
from mlx_agent.runtime.entries.accel_entry import split_accel_flags
from mlx_agent.runtime.entries.file_checks import refuse_if_changed, split_expectations
from mlx_agent.runtime.serving import socket_limits


def main(argv: list[str]) -> int:
    """Check what the plan bound, then run the wrapped mlx_lm server; return the process exit status."""
    expected, native = split_expectations(argv)
    refuse_if_changed(expected)  # reviewed adapter files, checked in this process before anything loads
    accel, native = split_accel_flags(native)
    refuse_if_runtime_changed(accel)  # the reviewed versions and sources of --prompt-lookup/--m5-prefill
    limits, native = socket_limits.split_socket_flags(native)
    socket_limits.configure(limits)  # what the handler reads every request under
    from mlx_agent.runtime.entries.mlx_lm_server import serve  # here: mlx_lm is imported only after the checks

    return serve(native, accel)
