"""``mlx-agent pull ORG/NAME [--revision R]``: a reviewed download into the Hugging Face cache.

The preview names the commit the revision resolves to, the files it would fetch with their sizes, the ones it
leaves on the Hub and why, the free disk, and what the model would be here; ``--confirm --preview-hash H``
fetches exactly those files (``supervise/pull.py``). On a person's terminal the preview asks "Fetch this plan?"
once. Under ``--json`` a confirm prints one JSON line per progress step, then the envelope.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

import click

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from mlx_agent.plan.pull_records import PullPreview, PullProgress, PullResult


def _size(n: int | None) -> str:
    from mlx_agent.cli.render import _size as size

    return "unknown" if n is None else size(n)


def render_preview(data: PullPreview, warnings: list[str]) -> None:
    """Print the files to fetch, those left out, the disk, what the model would be, and the confirm command."""
    import shlex

    from rich.markup import escape
    from rich.table import Table

    from mlx_agent.cli.render import _invoked_as, _warnings, err, out
    from mlx_agent.plan.pull import SKIP_REASONS

    plan, disk, servable = data["plan"], data["disk"], data["servable"]
    title = f"pull {plan['repo']}@{plan['revision']} = commit {plan['commit']} (nothing fetched)"
    table = Table("file", "role", "size", title=escape(title), title_justify="left")
    for f in plan["files"]:
        table.add_row(escape(f["name"]), f["role"], _size(f["size"]))
    table.add_row("[bold]total[/]", "", f"[bold]{_size(plan['total_bytes'])}[/]")
    out.print(table)
    for s in plan["skipped"]:
        out.print(f"[dim]left out:[/] {escape(s['name'])}: {SKIP_REASONS[s['reason']]}")
    fits = {True: "[green]fits[/]", False: "[red]does not fit[/]", None: "unknown"}[disk["fits"]]
    out.print(
        f"disk: {_size(disk['fetch_bytes'])} to fetch ({_size(disk['present_bytes'])} already in the cache), "
        f"{_size(disk['free_bytes'])} free at {escape(disk['path'])}: {fits}"
    )
    problem = servable["problem"] or servable["runtime_problem"]
    if problem is not None:
        out.print(f"servable here: [red]no[/], {problem['code']}: {escape(problem['message'])}")
    else:
        memory = servable["memory"]
        verdict = {True: "[green]fits[/]", False: "[red]too big[/]", None: "unknown"}[memory["fits"]]
        out.print(
            f"servable here: {servable['runtime']} ({servable['kind']}), "
            f"memory {_size(memory['estimate_bytes'])} of {_size(memory['available_bytes'])} available: {verdict}"
        )
    out.print(f"preview_hash: [green]{plan['preview_hash']}[/]")
    _warnings(warnings)
    confirm = shlex.join([*_invoked_as(), *sys.argv[1:], "--confirm", "--preview-hash", plan["preview_hash"]])
    out.print(f"To fetch, run: [bold]{escape(confirm)}[/]", soft_wrap=True)
    err.file.flush()


def render_result(data: PullResult, warnings: list[str]) -> None:
    """Print what was fetched and where the snapshot is."""
    from rich.markup import escape

    from mlx_agent.cli.render import _warnings, out

    _warnings(warnings)
    out.print(
        f"pulled {escape(data['repo'])} at {data['commit']}: {len(data['fetched'])} file(s) fetched "
        f"({_size(data['fetched_bytes'])}), {len(data['reused'])} already there"
    )
    out.print(f"snapshot: {escape(data['snapshot'])}")
    if data["ref"] is not None:
        out.print(f"ref: {escape(data['ref'])}")


def json_lines(event: PullProgress) -> None:
    """Print one progress event as a JSON document on one line of stdout (the envelope comes last)."""
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


@contextmanager
def bar() -> Iterator[Callable[[PullProgress], None]]:
    """Yield the callback that draws the fetch's progress bar on stderr, from its first event (not while checking)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from mlx_agent.cli.render import err

    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    progress = Progress(*columns, console=err)
    task = progress.add_task("fetching", total=None)

    def show(event: PullProgress) -> None:
        progress.start()  # a no-op once started
        progress.update(task, description=event["file"], completed=event["done_bytes"], total=event["fetch_bytes"])

    try:
        yield show
    finally:
        if progress.live.is_started:
            progress.stop()


@click.command("pull")
@click.argument("repo")
@click.option("--revision", default="main", show_default=True, help="A branch, tag or commit of the repo.")
@click.option(
    "--allow-code",
    is_flag=True,
    help="Also fetch the repo's own *.py files, bound by hash (mlx-agent never runs them).",
)
@click.option("--confirm", is_flag=True, help="Fetch the reviewed plan (needs --preview-hash).")
@click.option("--preview-hash", default=None, help="The preview_hash of the reviewed preview.")
@click.option("--receipts-dir", default=None, help="Where the pull receipts go [$MLX_AGENT_HOME].")
@click.option("--json", "as_json", is_flag=True, help="The JSON envelope on stdout (a confirm: progress lines first).")
def pull(
    repo: str,
    revision: str,
    allow_code: bool,
    confirm: bool,
    preview_hash: str | None,
    receipts_dir: str | None,
    as_json: bool,
) -> None:
    """Fetch REPO (ORG/NAME) from the Hugging Face Hub into its cache: weights, config, tokenizer, template.

    The preview resolves --revision to a commit and lists each file with its size, the free disk and whether
    the model would be servable here; --confirm --preview-hash H fetches exactly those files, resumes a broken
    download, checks each file's size and hash, and refuses preview_stale if the revision moved.
    """
    from mlx_agent.cli.output import run
    from mlx_agent.supervise import pull as pulling

    def preview() -> tuple[PullPreview, list[str]]:
        from mlx_agent.plan.pull import preview_warnings

        data = pulling.preview(repo, revision, allow_code)
        return data, preview_warnings(data["disk"], data["servable"])

    if not confirm:
        from mlx_agent.cli.ask import preview_and_ask

        reviewed = preview_and_ask("pull", as_json, "Fetch", preview, render_preview)
        if reviewed is None:
            return
        preview_hash = reviewed

    def fetch() -> tuple[PullResult, list[str]]:
        if as_json:
            return pulling.confirm(repo, revision, allow_code, preview_hash, receipts_dir, json_lines), []
        with bar() as show:
            return pulling.confirm(repo, revision, allow_code, preview_hash, receipts_dir, show), []

    run("pull", as_json, fetch, render_result)
