"""The agent commands: ``run AGENT`` (no file changed) and the ``wire`` group (``wire env`` here; H8's file edits).

``wire`` is a ``WireGroup``: its subcommands (``env``, ``status``, ...) are named as usual, and a first
argument that names no subcommand is an agent, so ``mlx-agent wire claude --port 8080`` runs the hidden
subcommand ``WIRE_AGENT`` (``wire agent claude --port 8080``). The module that writes config files
registers it with ``@wire.command(WIRE_AGENT, hidden=True)`` taking the agent as its first argument.
"""

from __future__ import annotations

import os
import sys

import click

from mlx_agent.plan.agent_settings import CLIENTS, agent_notes

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


def _facts(port: int, receipts_dir: str | None, model: str | None) -> Any:
    from mlx_agent.home import receipts_dir as serve_dir
    from mlx_agent.supervise.agent_run import check_model, served_facts

    facts = served_facts(serve_dir("serve", receipts_dir), port)
    check_model(facts, model)
    return facts


_PORT = click.option("--port", type=click.IntRange(1, 65535), required=True, help="The port of a running server.")
_MODEL = click.option("--model", default=None, help="A served name or alias for the agent to use [the first model].")
_RECEIPTS = click.option("--receipts-dir", default=None, help="Where the server's receipt is [$MLX_AGENT_HOME].")


@click.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("agent")
@_PORT
@_MODEL
@click.option("--agent-bin", default=None, help="The agent's executable [its command on PATH].")
@_RECEIPTS
@click.option("--json", "as_json", is_flag=True, help="Report a refusal as the JSON envelope (the agent owns stdout).")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run_agent(
    agent: str,
    port: int,
    model: str | None,
    agent_bin: str | None,
    receipts_dir: str | None,
    as_json: bool,
    args: tuple[str, ...],
) -> None:
    """Start AGENT (claude, codex, opencode) against the server on --port; no file is changed.

    Its settings go in its environment (Codex: `-c` overrides before ARGS), the key only in the environment;
    everything after `--` is passed to the agent, which then runs in this process (exec): it keeps the
    terminal, and its exit status is this command's.
    """
    from mlx_agent.cli.output import fail
    from mlx_agent.errors import MlxAgentError
    from mlx_agent.supervise import agent_run

    try:
        agent_run.check_agent(agent)
        facts = _facts(port, receipts_dir, model)
        binary = agent_run.find_binary(agent, agent_bin)
        argv, env = agent_run.agent_launch(agent, facts, model, binary, list(args), dict(os.environ))
    except MlxAgentError as exc:
        fail("run", exc, as_json)
    for note in agent_notes(agent):  # on stderr before the agent takes the terminal: stdout is the agent's
        click.echo(f"note: {note}", err=True)
    agent_run.exec_agent(argv, env)


@wire.command("env")
@_PORT
@_MODEL
@click.option(
    "--agent",
    "client",
    default=None,
    help=f"Whose settings: {', '.join(CLIENTS)} (any client of that API) [both APIs].",
)
@click.option(
    "--shell",
    type=click.Choice(["sh", "fish", "json"]),
    default="sh",
    show_default=True,
    help="sh: export lines; fish: set -gx lines; json: the JSON envelope.",
)
@click.option("--show-key", is_flag=True, help="Print the key itself, not a command that reads it from its file.")
@_RECEIPTS
@click.option("--json", "as_json", is_flag=True, help="The JSON envelope (the same as --shell json).")
def wire_env(
    port: int,
    model: str | None,
    client: str | None,
    shell: str,
    show_key: bool,
    receipts_dir: str | None,
    as_json: bool,
) -> None:
    """Print the environment that points an agent or any OpenAI/Anthropic client at the server on --port.

    `eval "$(mlx-agent wire env --port 8080 --agent claude)"` then `claude` uses the server; `--shell fish`
    for fish. The key is printed as `$(grep ... KEYFILE)`, read from the server's key file when the shell
    runs the line, unless --show-key; under --json the key's variables are null unless --show-key.
    """
    from mlx_agent.cli.output import run
    from mlx_agent.plan import agent_settings as settings
    from mlx_agent.supervise import agent_run

    as_json = as_json or shell == "json"

    def action() -> tuple[dict[str, Any], list[str]]:
        if client is not None:
            agent_run.check_agent(client, CLIENTS)
        facts = _facts(port, receipts_dir, model)
        env, unset, argv = settings.wire_settings(facts, client, model)
        hidden = sorted(settings.KEY_VARS & env.keys()) if facts.api_key is not None and not show_key else []
        data: dict[str, Any] = {
            "port": port,
            "agent": client,
            "base_url": facts.base_url,
            "model": settings.main_model(facts, model),
            "env": {k: None if k in hidden else v for k, v in env.items()},
            "unset": unset,
            "args": argv,
            "key": {"file": facts.key_file, "vars": hidden, "shown": facts.api_key is not None and show_key},
            "text": settings.shell_text(
                env, unset, argv, "fish" if shell == "fish" else "sh", facts.key_file, frozenset(hidden)
            ),
        }
        return data, agent_notes(client)

    def render(data: dict[str, Any], warnings: list[str]) -> None:
        sys.stdout.write(data["text"])
        for note in warnings:  # stderr: stdout is the text a shell evaluates
            click.echo(f"note: {note}", err=True)

    run("wire.env", as_json, action, render)
