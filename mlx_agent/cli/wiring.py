"""`wire AGENT`, `wire status` and `unwire AGENT`: reviewed edits of an agent's own config file, and their undoing.

Each is a preview (the diff of every file, what is kept, the ``preview_hash``) and then the same command with
``--confirm --preview-hash H``. The commands join the ``wire`` group of ``cli/agents.py``; ``unwire`` is
top-level (``cli/app.py`` adds it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from mlx_agent.cli.agents import WIRE_AGENT, wire
from mlx_agent.errors.commands import PreviewHashRequired

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_SCOPE = click.option(
    "--scope",
    type=click.Choice(["user", "project"]),
    default="user",
    show_default=True,
    help="The user's own settings, or the project's in the current directory.",
)
_CONFIRM = click.option("--confirm", is_flag=True, help="Write the reviewed edit (needs --preview-hash).")
_HASH = click.option("--preview-hash", default=None, help="The preview_hash of the reviewed preview.")
_JSON = click.option("--json", "as_json", is_flag=True, help="The JSON envelope on stdout.")
_RECEIPTS = click.option("--receipts-dir", default=None, help="Where the server's receipt is [$MLX_AGENT_HOME].")


def _dirs(receipts_dir: str | None) -> tuple[Path, Path]:
    from mlx_agent.home import receipts_dir as serve_dir
    from mlx_agent.home import wired_dir

    return serve_dir("serve", receipts_dir), wired_dir()


def _render_plan(data: dict[str, Any], warnings: list[str]) -> None:
    """Print a wire/unwire preview (each file's diff) or what a confirm did."""
    plan = data.get("plan")
    if plan is None:
        for entry in data["files"]:
            action = entry.get("action", "written")
            click.echo(f"{action}: {entry['path']}")
            if entry.get("kept"):
                kept = ", ".join(".".join(k) for k in entry["kept"])
                click.echo(f"  edited since the wire: kept your values of {kept}; only the wire's own keys went")
        click.echo(f"record: {data['record']}")
    else:
        for entry in plan["files"]:
            click.echo(entry["diff"] or f"(no change to {entry['path']})", nl=False)
            if entry.get("backup"):
                click.echo(f"# the original is kept as {entry['backup']}")
            if entry.get("normalised"):
                click.echo(f"# {entry['path']} is re-serialised: whitespace inside its arrays and escapes change")
            if entry.get("action") == "remove_keys":
                click.echo(f"# {entry['path']} was edited since the wire: only the wire's own keys are taken out")
        click.echo(f"preview_hash: {plan['preview_hash']}")
        click.echo("re-run with --confirm --preview-hash " + plan["preview_hash"])
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)


@wire.command(WIRE_AGENT, hidden=True)
@click.argument("agent")
@click.option("--port", type=click.IntRange(1, 65535), required=True, help="The port of a running server.")
@click.option("--model", default=None, help="A served name or alias for the agent to use [the first model].")
@_SCOPE
@click.option(
    "--default", "as_default", is_flag=True, help="Make it the agent's default (Codex: top-level keys, not a profile)."
)
@_CONFIRM
@_HASH
@_RECEIPTS
@_JSON
def wire_agent(
    agent: str,
    port: int,
    model: str | None,
    scope: str,
    as_default: bool,
    confirm: bool,
    preview_hash: str | None,
    receipts_dir: str | None,
    as_json: bool,
) -> None:
    """Point AGENT (claude, codex, opencode) at the server on --port by editing its config file (previewed)."""
    from mlx_agent.cli.output import run
    from mlx_agent.plan.wiring import agent_edits, config_files, load, read_current
    from mlx_agent.supervise import wiring

    warned: list[str] = []

    def build() -> tuple[dict[str, Any], dict[str, bytes]]:
        files = config_files(agent, scope, os.environ, Path.cwd(), default=as_default)
        for cf in files:  # a file that does not parse is refused before the server is asked anything
            load(cf, read_current(cf))
        directory, wired = _dirs(receipts_dir)
        facts, server = wiring.served_server(directory, port, model)
        edits, warnings = agent_edits(agent, files, facts, model, as_default)
        warned[:] = warnings
        return wiring.plan_wire(agent, scope, server, edits, wired)

    def action() -> tuple[dict[str, Any], list[str]]:
        if not confirm:
            plan = wiring.preview(build()[0])
            return {"plan": plan, "requires_confirmation": True}, warned
        if not preview_hash:
            raise PreviewHashRequired("--confirm needs the --preview-hash of a reviewed preview")
        files = config_files(agent, scope, os.environ, Path.cwd(), default=as_default)
        with wiring.wiring_lock(_dirs(receipts_dir)[1], agent, scope, files):
            plan, new = wiring.reviewed(build, preview_hash)
            record = wiring.confirm_wire(plan, new)
        return {
            "record": plan["record"],
            "wired": record,
            "files": record["files"],
            "requires_confirmation": False,
        }, warned

    if not confirm:
        from mlx_agent.cli.ask import preview_and_ask

        reviewed = preview_and_ask("wire", as_json, "Apply", action, _render_plan)
        if reviewed is None:
            return
        confirm, preview_hash = True, reviewed  # what ``action`` reads: now the confirm of the plan shown
    run("wire", as_json, action, _render_plan)


@wire.command("status")
@_RECEIPTS
@_JSON
def wire_status(receipts_dir: str | None, as_json: bool) -> None:
    """List each wiring: whether its files still hold what was written, and whether its server is the one wired."""
    from mlx_agent.cli.output import run
    from mlx_agent.supervise.wiring import wiring_status

    def action() -> tuple[dict[str, Any], list[str]]:
        directory, wired = _dirs(receipts_dir)
        return {"wirings": wiring_status(wired, directory)}, []

    def render(data: dict[str, Any], warnings: list[str]) -> None:
        if not data["wirings"]:
            click.echo("nothing is wired")
        for item in data["wirings"]:
            server = item["server"]["state"]
            click.echo(
                f"{item['agent']} ({item['scope']}) -> {item['base_url']} model {item['model']}: server {server}"
            )
            for entry in item["files"]:
                click.echo(f"  {entry['path']}: {entry['state']}")
                for d in entry["drift"]:
                    click.echo(f"    {'.'.join(d['key'])}: {d['state']}")
        sys.stdout.flush()

    run("wire.status", as_json, action, render)


@click.command("unwire")
@click.argument("agent")
@_SCOPE
@_CONFIRM
@_HASH
@_JSON
def unwire(agent: str, scope: str, confirm: bool, preview_hash: str | None, as_json: bool) -> None:
    """Undo `wire AGENT`: the original bytes back if the files are unchanged since, else only the wire's keys out."""
    from mlx_agent.cli.output import run
    from mlx_agent.home import wired_dir
    from mlx_agent.plan.wiring import config_files
    from mlx_agent.supervise import wiring

    def build() -> tuple[dict[str, Any], dict[str, bytes | None]]:
        files = config_files(agent, scope, os.environ, Path.cwd())
        return wiring.plan_unwire(wired_dir(), agent, scope, files)

    def action() -> tuple[dict[str, Any], list[str]]:
        if not confirm:
            return {"plan": wiring.preview(build()[0]), "requires_confirmation": True}, []
        if not preview_hash:
            raise PreviewHashRequired("--confirm needs the --preview-hash of a reviewed preview")
        files = config_files(agent, scope, os.environ, Path.cwd())
        with wiring.wiring_lock(wired_dir(), agent, scope, files):
            plan, new = wiring.reviewed(build, preview_hash)
            return {**wiring.confirm_unwire(plan, new), "requires_confirmation": False}, []

    if not confirm:
        from mlx_agent.cli.ask import preview_and_ask

        reviewed = preview_and_ask("unwire", as_json, "Apply", action, _render_plan)
        if reviewed is None:
            return
        confirm, preview_hash = True, reviewed  # what ``action`` reads: now the confirm of the plan shown
    run("unwire", as_json, action, _render_plan)
