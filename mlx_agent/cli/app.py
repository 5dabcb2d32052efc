"""The Click command tree, built from ``plan.requests.COMMANDS``; each command hands its record to ``actions.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from mlx_agent import __version__
from mlx_agent.cli.actions import ACTIONS, dispatch
from mlx_agent.plan.options import Opt, choices, problem
from mlx_agent.plan.requests import COMMANDS


def _click_type(opt: Opt) -> Any:
    allowed = choices(opt)
    if allowed is not None:
        return click.Choice(allowed)
    if opt.kind == "int" and opt.minimum is None and opt.maximum is None:
        return click.INT  # a set of allowed numbers is checked by the option's callback
    if opt.kind == "int":
        return click.IntRange(
            None if opt.minimum is None else int(opt.minimum), None if opt.maximum is None else int(opt.maximum)
        )
    if opt.kind == "float":
        return click.FloatRange(opt.minimum, opt.maximum, min_open=opt.min_open)
    return click.STRING


def _checked(opt: Opt) -> Callable[[click.Context, click.Parameter, Any], Any] | None:
    """Return a callback refusing what the type alone does not (a number outside an option's allowed values)."""
    if opt.values is None:
        return None

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        wrong = problem(opt, value)
        if wrong is not None:
            raise click.BadParameter(wrong, ctx, param)
        return value

    return check


def _with_options(options: tuple[Opt, ...]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        for opt in reversed(options):
            if opt.kind == "flag":
                fn = click.option(opt.flag, opt.dest, is_flag=True, default=opt.default, help=opt.help)(fn)
            elif opt.kind == "multi":
                fn = click.option(opt.flag, opt.dest, multiple=True, type=click.STRING, help=opt.help)(fn)
            else:
                fn = click.option(
                    opt.flag,
                    opt.dest,
                    type=_click_type(opt),
                    default=opt.default,
                    required=opt.required,
                    show_default=opt.default is not None,
                    callback=_checked(opt),
                    help=opt.help,
                )(fn)
        return fn

    return decorate


def _command(group: click.Group, key: tuple[str, str]) -> None:
    command = COMMANDS[key]

    def callback(**values: Any) -> None:
        record, flags = command.parse(values)
        dispatch(key, record, flags)

    callback.__doc__ = ACTIONS[key].__doc__
    group.command(name=key[1])(_with_options(command.options)(callback))


@click.group()
@click.version_option(__version__, prog_name="mlx-agent")
def cli() -> None:
    """Plan, review, launch, supervise and stop local MLX model servers."""


@cli.group()
def serve() -> None:
    """Launch, inspect and stop local MLX servers from reviewed plans."""


@cli.group()
def lora() -> None:
    """Train LoRA adapters from reviewed plans and follow their progress."""


GROUPS = {"serve": serve, "lora": lora}
for _key in COMMANDS:
    _command(GROUPS[_key[0]], _key)

from mlx_agent.cli.agents import run_agent, wire  # noqa: E402  (the agent commands)

cli.add_command(run_agent)
cli.add_command(wire)

from mlx_agent.cli.wiring import unwire  # noqa: E402  (wire AGENT, wire status: on the wire group)

cli.add_command(unwire)

from mlx_agent.cli.top import top  # noqa: E402  (serve top: a live view, not a planned command)

serve.add_command(top)

from mlx_agent.cli.models import models  # noqa: E402  (models: a listing, not a planned command)

cli.add_command(models)

from mlx_agent.cli.pull import pull  # noqa: E402  (pull: a reviewed download, its own preview and confirm)

cli.add_command(pull)
from mlx_agent.cli.mcp_server import mcp  # noqa: E402  (mcp: the commands above as MCP tools, over stdio)

cli.add_command(mcp)
