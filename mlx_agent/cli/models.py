"""``mlx-agent models``: every model in the Hugging Face cache and the given directories, one row each.

Nothing to review or confirm: it reads files and the receipts of this home, and changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import click

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.plan.catalog_records import ModelRow, ModelsListing


def _gb(value: int | None) -> str:
    if value is None:
        return "-"
    if value >= 100_000_000:
        return f"{value / 1e9:.1f} GB"
    return f"{value / 1e6:.1f} MB" if value >= 100_000 else f"{value / 1e3:.0f} kB"


def _row_cells(row: ModelRow) -> list[str]:
    from rich.markup import escape

    state = "[green]all[/]" if row["complete"] else "[red]partial[/]"
    runtime = f"{row['runtime']} ({row['kind']})" if row["runtime"] else "-"
    if row["runtime_problem"] is not None:
        runtime = "[red]none[/]"
    quant = row["quantization"]
    size = _gb(row["size_bytes"]) + ("" if quant is None else f" {quant['bits']}-bit/{quant['group_size']}")
    agents = row["agents"]
    tools = "-"
    if agents is not None:
        tools = ("tools" if agents["renders_tools"] else "no tools") + f" {agents['tool_parser'] or '-'}"
        tools += " thinking" if agents["thinking"] else ""
    memory = row["memory"]
    fits = "-"
    if memory is not None and memory["estimate_bytes"] is not None:
        verdict = {True: "[green]fits[/]", False: "[red]too big[/]", None: "unknown"}[memory["fits"]]
        fits = f"{_gb(memory['estimate_bytes'])} {verdict}"
    return [
        escape(row["name"]),
        state,
        runtime,
        size,
        str(row["context_window"] or "-"),
        tools,
        fits,
        ", ".join(str(s["port"]) for s in row["served"]) or "-",
    ]


def render_models(data: ModelsListing, warnings: list[str]) -> None:
    """Print one row per model found, then why each incomplete or unservable one is so (on stderr)."""
    from rich.markup import escape
    from rich.table import Column, Table

    from mlx_agent.cli.render import _warnings, err, out

    _warnings(warnings)
    if not data["models"]:
        places = ", ".join([data["hf_cache"], *data["dirs"]])
        out.print(f"No models found in {escape(places)}.")
        return
    longest = max(len(row["name"]) for row in data["models"])
    name = Column("model", no_wrap=True, min_width=min(longest, 48))  # the name whole; the other columns wrap
    table = Table(name, "files", "runtime", "size", "context", "agents", "memory", "port")
    for row in data["models"]:
        table.add_row(*_row_cells(row))
    out.print(table)
    for row in data["models"]:
        if row["missing"]:
            err.print(f"{escape(row['name'])}: lacks {escape(', '.join(row['missing']))}")
        for problem in (row["problem"], row["runtime_problem"]):
            if problem is not None:
                err.print(f"{escape(row['name'])}: [red]{problem['code']}[/]: {escape(problem['message'])}")


@click.command("models")
@click.option("--dir", "dirs", multiple=True, help="A model directory, or a folder of them, to list too (repeatable).")
@click.option("--receipts-dir", default=None, help="Where the servers' receipts are [$MLX_AGENT_HOME].")
@click.option("--json", "as_json", is_flag=True, help="The JSON envelope on stdout.")
def models(dirs: tuple[str, ...], receipts_dir: str | None, as_json: bool) -> None:
    """List the models in the Hugging Face cache and in --dir: complete or not, runtime, memory, served port."""
    from mlx_agent.cli.output import run

    def action() -> tuple[ModelsListing, list[str]]:
        from mlx_agent.home import receipts_dir as serve_dir
        from mlx_agent.load_memory import available_memory
        from mlx_agent.plan.catalog import find_models
        from mlx_agent.plan.source import hf_hub_cache
        from mlx_agent.supervise.served import served_models

        directory = serve_dir("serve", receipts_dir)
        rows = find_models([Path(d) for d in dirs], available_memory())
        served = served_models(directory)
        for row in rows:
            if row["path"] is not None:
                row["served"] = served.get(str(Path(row["path"]).resolve()), [])
        listing: ModelsListing = {
            "hf_cache": str(hf_hub_cache()),
            "dirs": [str(Path(d).expanduser().absolute()) for d in dirs],
            "receipts_dir": str(directory),
            "models": rows,
        }
        return listing, []

    def render(data: ModelsListing, warnings: list[str]) -> None:
        render_models(data, warnings)

    run("models", as_json, action, render)
