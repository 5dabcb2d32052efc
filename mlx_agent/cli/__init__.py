"""The ``mlx-agent`` command line: thin commands that parse, call the core, and render.

``main`` tries the click-free fast path first (``fast.py``) and otherwise runs the Click tree (``app.py``).
"""

from __future__ import annotations

import sys


def _operation(argv: list[str]) -> str:
    words = [w for w in argv if not w.startswith("-")][:2]
    return ".".join(words) if words else "mlx-agent"


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a usage error under ``--json`` still prints one envelope and exits 2.

    Run as the command (``argv`` None), one the fast path served exits from here, without the interpreter's
    teardown (``exiting``); called with ``argv``, it returns, leaving the caller's process to the caller.
    """
    args = sys.argv[1:] if argv is None else argv
    from mlx_agent.cli.fast import run_fast

    if run_fast(args):
        if argv is not None:
            return
        from mlx_agent.exiting import exit_without_teardown

        exit_without_teardown(0)  # the answer is out: the modules' teardown would only delay the caller
    import click

    from mlx_agent.cli.app import cli
    from mlx_agent.cli.output import emit_json, envelope
    from mlx_agent.errors import InvalidArguments

    try:
        cli.main(args=args, prog_name="mlx-agent", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.UsageError as exc:
        if "--json" in args:
            emit_json(envelope(_operation(args), None, [], InvalidArguments(exc.format_message())))
        else:
            exc.show()
        sys.exit(2)
