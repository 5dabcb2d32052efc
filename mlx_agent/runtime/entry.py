"""Entry point of a launched server: ``python -m mlx_agent.runtime RUNTIME [native args...]``."""

from __future__ import annotations

import sys

USAGE = "usage: python -m mlx_agent.runtime {mlx_lm|mlx-vlm} [the runtime server's arguments...]"


def main(argv: list[str]) -> int:
    """Run the named runtime's server with our wrapping; return the process exit status."""
    if argv[:1] == ["mlx-vlm"]:
        from mlx_agent.runtime.entries.mlx_vlm_server import serve as serve_vlm

        return serve_vlm(argv[1:])
    if argv[:1] != ["mlx_lm"]:
        print(USAGE, file=sys.stderr)
        return 2
    from mlx_agent.runtime.entries.accel_entry import refuse_if_changed as refuse_if_runtime_changed
    from mlx_agent.runtime.entries.accel_entry import split_accel_flags
    from mlx_agent.runtime.entries.file_checks import refuse_if_changed, split_expectations

    expected, native = split_expectations(argv[1:])
    refuse_if_changed(expected)  # reviewed adapter files, checked in this process before anything loads
    accel, native = split_accel_flags(native)
    refuse_if_runtime_changed(accel)  # the reviewed versions and sources of --prompt-lookup/--m5-prefill
    from mlx_agent.runtime.entries.mlx_lm_server import serve

    return serve(native, accel)
