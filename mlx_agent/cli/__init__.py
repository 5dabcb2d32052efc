"""The ``mlx-agent`` command line: Click commands that parse, call the core, and render."""

from __future__ import annotations

import sys

import click

from mlx_agent import __version__
from mlx_agent.cli.output import emit_json, envelope
from mlx_agent.cli.serve import serve
from mlx_agent.errors import InvalidArguments


@click.group()
@click.version_option(__version__, prog_name="mlx-agent")
def cli() -> None:
    """Plan, review, launch, supervise and stop local MLX model servers."""


cli.add_command(serve)


def _operation(argv: list[str]) -> str:
    words = [w for w in argv if not w.startswith("-")][:2]
    return ".".join(words) if words else "mlx-agent"


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; a usage error under ``--json`` still prints one envelope and exits 2."""
    args = sys.argv[1:] if argv is None else argv
    try:
        cli.main(args=args, prog_name="mlx-agent", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.UsageError as exc:
        if "--json" in args:
            error = InvalidArguments(exc.format_message())
            emit_json(envelope(_operation(args), None, [], error))
        else:
            exc.show()
        sys.exit(2)
