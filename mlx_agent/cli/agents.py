"""The agent commands: ``run AGENT`` (no file changed) and the ``wire`` group (``wire env`` here; H8's file edits).

``wire`` is a ``WireGroup``: its subcommands (``env``, ``status``, ...) are named as usual, and a first
argument that names no subcommand is an agent, so ``mlx-agent wire claude --port 8080`` runs the hidden
subcommand ``WIRE_AGENT`` (``wire agent claude --port 8080``). The module that writes config files
registers it with ``@wire.command(WIRE_AGENT, hidden=True)`` taking the agent as its first argument.
"""

from __future__ import annotations

import click

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WIRE_AGENT = "agent"  # the subcommand a bare agent name runs: `wire claude ...` is `wire agent claude ...`


class WireGroup(click.Group):
    """A group whose unknown first word is an agent for the ``WIRE_AGENT`` subcommand."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Resolve a subcommand; a first word naming none goes, with the rest, to ``WIRE_AGENT``."""
        if args and args[0] not in self.commands and not args[0].startswith("-") and WIRE_AGENT in self.commands:
            return WIRE_AGENT, self.commands[WIRE_AGENT], args
        return super().resolve_command(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: Any) -> None:
        """Show both forms: a subcommand, or an agent to wire."""
        formatter.write_usage(ctx.command_path, "[AGENT | COMMAND] [ARGS]...")


@click.group(cls=WireGroup)
def wire() -> None:
    """Point an agent at a served model: `wire AGENT` edits its config (previewed), `wire env` prints settings."""
