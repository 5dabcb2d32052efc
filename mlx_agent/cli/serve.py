"""``mlx-agent serve start|status|stop``."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import click

from mlx_agent.cli.output import Result, run
from mlx_agent.home import receipts_dir
from mlx_agent.plan.runtime import recipe_names
from mlx_agent.plan.serve_plan import DEFAULT_MAX_TOKENS, DEFAULT_READY_TIMEOUT, ServeRequest

json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON envelope on stdout.")
receipts_option = click.option("--receipts-dir", type=click.Path(file_okay=False),
                               help="Base directory of receipts (default: $MLX_AGENT_HOME/receipts).")
PORT = click.IntRange(1, 65535)


@click.group()
def serve() -> None:
    """Launch, inspect and stop local MLX servers from reviewed plans."""


def _render(name: str) -> Any:
    def render(data: dict[str, Any], warnings: list[str]) -> None:
        from mlx_agent.cli import render as r

        getattr(r, name)(data, warnings)

    return render


@serve.command()
@click.option("--path", "path", help="Absolute path of a local model directory.")
@click.option("--repo", help="ORG/NAME of a model already in the Hugging Face cache.")
@click.option("--runtime", type=click.Choice(recipe_names()), default="mlx_lm", show_default=True)
@click.option("--runtime-executable", help="Absolute path of a runtime installed in another environment.")
@click.option("--port", type=PORT, help="Loopback port (default: the runtime's, 8080 for mlx_lm).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=DEFAULT_MAX_TOKENS, show_default=True,
              help="Default reply limit of the server.")
@click.option("--ready-timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_READY_TIMEOUT,
              show_default=True, help="Seconds to wait for the model to load and answer.")
@click.option("--confirm", is_flag=True, help="Launch the plan whose hash is given with --preview-hash.")
@click.option("--preview-hash", help="The preview_hash of the reviewed plan.")
@receipts_option
@json_option
def start(path: str | None, repo: str | None, runtime: str, runtime_executable: str | None, port: int | None,
          max_tokens: int, ready_timeout: float, confirm: bool, preview_hash: str | None,
          receipts_dir: str | None, as_json: bool) -> None:
    """Preview a server plan, or launch it with --confirm --preview-hash H."""
    from mlx_agent.supervise import serve as lifecycle

    req = ServeRequest(path=path, repo=repo, runtime=runtime, port=port, max_tokens=max_tokens,
                       ready_timeout=ready_timeout, runtime_executable=runtime_executable)
    directory = _serve_dir(receipts_dir)

    def do_preview() -> Result:
        plan, warnings = lifecycle.preview(req, directory)
        return {"plan": plan, "requires_confirmation": True}, warnings

    def do_confirm() -> Result:
        if as_json:
            spin: Any = nullcontext(None)
        else:
            from mlx_agent.cli.render import spinner

            spin = spinner("loading the model")
        with spin as tick:
            receipt, warnings = lifecycle.confirm(req, preview_hash, directory, tick)
        path_ = str(directory / f"{receipt['port']}.json")
        return {"receipt": receipt, "receipt_path": path_, "requires_confirmation": False}, warnings

    if confirm:
        run("serve.start", as_json, do_confirm, _render("render_receipt"))
    else:
        run("serve.start", as_json, do_preview, _render("render_preview"))


def _serve_dir(override: str | None) -> Any:
    return receipts_dir("serve", override)


@serve.command()
@click.option("--port", type=PORT, help="Only this port.")
@receipts_option
@json_option
def status(port: int | None, receipts_dir: str | None, as_json: bool) -> None:
    """Show each server with a receipt, checked against the live process."""
    from mlx_agent.supervise import serve as lifecycle

    directory = _serve_dir(receipts_dir)

    def action() -> Result:
        return {"receipts_dir": str(directory), "servers": lifecycle.status(directory, port)}, []

    run("serve.status", as_json, action, _render("render_status"))


@serve.command()
@click.option("--port", type=PORT, required=True)
@receipts_option
@json_option
def stop(port: int, receipts_dir: str | None, as_json: bool) -> None:
    """Stop the server on a port, only if the live process is the one its receipt started."""
    from mlx_agent.supervise import serve as lifecycle

    directory = _serve_dir(receipts_dir)
    run("serve.stop", as_json, lambda: (lifecycle.stop(directory, port), []), _render("render_stop"))
