"""Human output with rich. Imported only when ``--json`` is not given, because rich costs start-up time."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mlx_agent.errors import MlxAgentError
from mlx_agent.supervise.readiness import Tick

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.cli.output import Launched, Previewed, TrainingStarted

out = Console()
err = Console(stderr=True)


def _warnings(warnings: list[str]) -> None:
    for warning in warnings:
        err.print(f"[yellow]warning:[/] {escape(warning)}")


def render_error(error: MlxAgentError) -> None:
    """Print an error, its code, the remedy and the details a person needs."""
    err.print(f"[bold red]error[/] [red]{error.code}[/]: {escape(error.message)}")
    changes = error.details.get("changes")
    if changes:
        table = Table("field", "previewed", "now", title="What changed since the preview")
        for change in changes:
            table.add_row(escape(change["field"]), escape(str(change["old"])), escape(str(change["new"])))
        err.print(table)
    for line in error.details.get("log_tail", []) or []:
        err.print(f"  [dim]log |[/] {escape(line)}")
    err.print(f"[bold]remedy:[/] {escape(error.remediation)}")


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _invoked_as() -> list[str]:
    """Return the words that ran this command, so the printed confirm command can be pasted as is."""
    argv0 = sys.argv[0]
    if argv0.endswith("__main__.py"):
        return ["python", "-m", "mlx_agent"]
    if os.path.basename(argv0) == "mlx-agent" and os.sep + "bin" + os.sep in argv0:
        return ["mlx-agent"]
    return ["python3", argv0]


def _finish_plan(table: Table, plan: Mapping[str, Any], warnings: list[str], lead: str) -> None:
    """Add the environment and hash rows, print the plan, and the exact command that confirms it."""
    table.add_row("env", escape(" ".join(f"{k}={v}" for k, v in sorted(plan["env"].items()))))
    table.add_row("preview_hash", f"[green]{plan['preview_hash']}[/]")
    out.print(table)
    _warnings(warnings)
    confirm = shlex.join([*_invoked_as(), *sys.argv[1:], "--confirm", "--preview-hash", plan["preview_hash"]])
    out.print(f"{lead}, run: [bold]{escape(confirm)}[/]", soft_wrap=True)


def render_preview(data: Previewed, warnings: list[str]) -> None:
    """Print the plan a person reviews, its hash, and the command that confirms it."""
    plan = data["plan"]
    front = plan["front"]
    table = Table(show_header=False, title="serve start: plan (nothing started)", title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    table.add_row(
        "listen",
        f"{plan['base_url']} ({front['mode']}: "
        + (
            "loads a model on the first request that names it)"
            if front["mode"] == "jit"
            else "loads its model before it answers)"
        ),
    )
    if "models_file" in plan:
        mf = plan["models_file"]
        table.add_row("models file", escape(f"{mf['path']} (sha256 {mf['sha256'][:12]}, {len(plan['models'])} models)"))
    if front["max_loaded"] is not None:
        table.add_row("max loaded", f"{front['max_loaded']} at once (the least recently used idle one makes room)")
    for model in plan["models"]:
        source, runtime = model["source"], model["runtime"]
        where = source["path"] if source["kind"] == "path" else f"{source['repo']}@{source['revision']}"
        names = ", ".join([model["served_model_name"], *model["alias"]])
        table.add_row("model", escape(f"{names}: {where}"))
        total = sum(f["size"] for f in source["files"])
        hashed = all("sha256" in f for f in source["files"])
        how = "sha256 of every byte (--verify-weights)" if hashed else "identity (weights by stat and header)"
        table.add_row("files", f"{len(source['files'])} bound by {how}, {_size(total)}")
        if model["draft"] is not None:
            draft = model["draft"]["source"]
            steps = model["draft"]["num_draft_tokens"]
            table.add_row(
                "draft model",
                escape(f"{draft.get('repo') or draft['path']} ({len(draft['files'])} files bound)")
                + (f", {steps} tokens a step" if steps else "")
                + (f", drafter family {model['draft']['draft_kind']}" if "draft_kind" in model["draft"] else ""),
            )
        group = model.get("group")
        if group is not None:
            hosts = ", ".join(h["ips"][0] if h["ips"] else h["ssh"] for h in group["hosts"])
            table.add_row(
                "group",
                escape(f"{group['ranks']} ranks ({group['parallelism']} parallel, {group['backend']}) on {hosts}")
                + (f", ring ports from {group['ring_port']}" if group["ring_port"] is not None else "")
                + (
                    ", ring ports chosen at confirm" if group.get("ring_port_chosen") and not group["ring_port"] else ""
                ),
            )
        kv = model["kv_cache"]
        if kv is not None:
            scheme = f" {kv['kv_quant_scheme']}" if "kv_quant_scheme" in kv else ""
            table.add_row("kv cache", f"{kv['kv_bits']}-bit{scheme}, groups of {kv['kv_group_size']}")
        for label, key in (("thinking budget", "thinking_budget"), ("max kv size", "max_kv_size")):
            if model.get(key) is not None:
                table.add_row(label, f"{model.get(key)} tokens")
        if model.get("vision_cache_size") is not None:
            table.add_row("vision cache", f"{model.get('vision_cache_size')} images' features")
        prefix = model.get("prefix_cache")
        if prefix is not None:
            where = escape(prefix["disk_path"]) if prefix["disk_path"] else "none"
            table.add_row(
                "prefix cache",
                f"{prefix['num_blocks']} blocks of {prefix['block_size']} tokens; disk {prefix['disk_max_gb']} GB: "
                + where,
            )
        lookup, kernel = model["decode_profile"], model["prefill_kernel"]
        for label, asked, fits, reasons in (
            ("prompt lookup", lookup["requested"], lookup["applied"], lookup["reasons"]),
            ("M5 prefill", kernel["requested"], kernel["eligible"], kernel["reasons"]),
        ):
            if asked:
                table.add_row(label, "applies" if fits else escape("native MLX: " + "; ".join(reasons)))
        agents = model.get("agents")
        if agents is not None:
            table.add_row("agents", escape(agents_summary(agents)))
        table.add_row("runtime", f"{runtime['name']} ({runtime['launcher']})")
        versions = ", ".join(f"{k} {v}" for k, v in (runtime.get("versions") or {}).items())
        table.add_row("versions", escape(versions))
        table.add_row("worker", escape(shlex.join(model["worker"]["argv"])))
    table.add_row("api keys", escape(front["api_key_file"] or "none (every loopback client is trusted)"))
    table.add_row("argv", escape(shlex.join(plan["argv"])))
    _finish_plan(table, plan, warnings, "To launch it")


def agents_summary(agents: Mapping[str, Any]) -> str:
    """Return one line of what a model can do for agents: its template, tools, parser, thinking, window."""
    template = agents["chat_template"]
    if template is None:
        return "no chat template"
    where = Path(template["path"]).name + (f" [{template['name']}]" if template.get("name") else "")
    parts = [f"template {where} ({template['source']})"]
    parts.append("renders tools" if agents["renders_tools"] else "does not render tools")
    parser = agents["tool_parser"]
    if agents["tool_parser_from"] == "runtime" and parser is None:
        parts.append("tool parser: the runtime's own")
    else:
        parts.append(f"tool parser {parser} ({agents['tool_parser_from']})" if parser else "no tool parser")
    parts.append("thinks" if agents["thinking"] else "no thinking")
    if agents["context_window"] is not None:
        parts.append(f"context {agents['context_window']}")
    if agents["render_error"] is not None:
        parts.append(f"cannot render {agents['render_error']}")
    return ", ".join(parts)


def render_receipt(data: Launched, warnings: list[str]) -> None:
    """Print what was launched and where its receipt and log are."""
    receipt = data["receipt"]
    _warnings(warnings)
    if "unit" in receipt:
        unit = receipt["unit"]
        out.print(f"[green]installed[/] {unit['kind']} unit {escape(unit['path'])} (nothing started)")
        out.print("Start it yourself with:")
        for command in unit["commands"]["start"]:
            out.print(f"  [bold]{escape(shlex.join(command))}[/]", soft_wrap=True)
        return
    out.print(
        f"[green]ready[/] {receipt['base_url']}  pid {receipt['pid']}  "
        f"receipt {escape(data['receipt_path'])}  log {escape(receipt['log_path'])}"
    )


def model_state(model: Mapping[str, Any]) -> str:
    """Return a model's state for the status table: ``loading 42%`` and ``prefill 37%`` where the JSON has them."""
    state = str(model.get("model_state") or "-")
    load = model.get("load_progress") or {}
    if state == "loading" and load.get("fraction") is not None:
        return f"loading {load['fraction'] * 100:.0f}%"
    fractions = [p["fraction"] for p in model.get("prefill") or [] if p.get("fraction") is not None]
    if state == "loaded" and fractions:  # the oldest request's, then how many more are reading a prompt
        more = f" (+{len(fractions) - 1})" if len(fractions) > 1 else ""
        return f"prefill {fractions[0] * 100:.0f}%{more}"
    return state


def caches_line(caches: Mapping[str, Any]) -> str:
    """Return an mlx-vlm model's caches for the status: its prefix cache's figures and its vision cache's size."""
    prefix = caches.get("prefix") or {}
    stats = prefix.get("stats") or {}
    if not prefix.get("enabled"):
        apc = "prefix cache off (--prefix-cache-gb)"
    elif not stats:
        apc = "prefix cache on (" + ("not loaded" if prefix.get("loaded") is False else "no report") + ")"
    else:
        apc = (
            f"prefix cache {stats.get('pool_used')}/{stats.get('num_blocks')} blocks, "
            f"{_size(int(stats.get('resident_bytes') or 0))} in memory, {stats.get('lookups_hit')} hits "
            f"{stats.get('lookups_miss')} misses, {stats.get('matched_tokens')} tokens matched"
        )
        if "disk_bytes" in stats:
            apc += f", {_size(int(stats['disk_bytes'] or 0))} on disk"
    vision = (caches.get("vision") or {}).get("size")
    return f"{apc}; vision cache holds up to {vision} images' features"


def render_status(data: dict[str, Any], warnings: list[str]) -> None:
    """Print one row per known server."""
    _warnings(warnings)
    if data.get("claims"):
        claims = Table("port", "claimed by", "expects runtime", "expects model", title="Wired configs")
        for c in data["claims"]:
            claims.add_row(
                str(c["port"]), escape(c["file"]), c.get("runtime") or "any", escape(c.get("model") or "any")
            )
        out.print(claims)
    if not data["servers"]:
        out.print(f"No servers have receipts in {escape(data['receipts_dir'])}.")
        return
    table = Table("port", "front", "pid", "model", "kind", "state", "worker", "loads", "last use", "memory")
    colours = {
        "running": "green",
        "starting": "yellow",
        "orphaned": "red",
        "exited": "dim",
        "foreign": "red",
        "unreadable": "red",
    }
    for s in data["servers"]:
        how = ", ".join(x for x in (s.get("mode"), s.get("health")) if x)
        state = s["state"] + (f" ({how})" if how else "")
        models = s.get("models") or [
            {"name": s.get("name") or s.get("repo") or s.get("model"), "model_state": s.get("model_state")}
        ]
        for index, m in enumerate(models):
            first = index == 0
            worker = m.get("worker") or {}
            estimate = m.get("memory_estimate_bytes")
            loads = str(m.get("loads", "-")) + (f" ({m['evictions']} evicted)" if m.get("evictions") else "")
            last = str(m.get("last_used") or "-")
            table.add_row(
                str(s["port"]) if first else "",
                f"[{colours.get(s['state'], 'white')}]{state}[/]" if first else "",
                str(s.get("pid", "-")) if first else "",
                escape(str(m.get("name") or "-")),
                str(m.get("kind") or "-"),
                model_state(m),
                str(worker.get("pid") or "-"),
                loads,
                last[11:19] if len(last) >= 19 else last,  # the time of day; --json has the whole date
                "-" if estimate is None else f"{estimate / 1e9:.1f} GB",
            )
    out.print(table)
    for s in data["servers"]:
        for ring in s.get("ring_ports") or []:
            ports = ring["ports"]
            out.print(f"port {s['port']}: {escape(ring['model'])} ring links on ports {ports[0]}-{ports[-1]}")
        for m in s.get("models") or []:
            if m.get("caches"):
                out.print(f"port {s['port']}: {escape(str(m.get('name')))} {escape(caches_line(m['caches']))}")
        for problem in s.get("problems") or []:
            model = f" {problem['model']}:" if problem.get("model") else ""
            out.print(f"[yellow]port {s['port']}:{escape(model)} {problem['code']}[/]: {escape(problem['message'])}")


def render_control(data: dict[str, Any], warnings: list[str]) -> None:
    """Print the answer of a front's control command."""
    _warnings(warnings)
    if "policy" in data:
        scope = f" for {escape(data['model'])}" if data.get("model") else ""
        out.print(f"port {data['port']}: policy{scope} is now {escape(str(data['policy']))}")
    else:
        names = ", ".join(escape(str(m.get("name"))) for m in data.get("models") or []) or "models"
        out.print(f"port {data['port']}: unloaded {names}; the front stays up and loads on the next request")


def render_logs(data: dict[str, Any], warnings: list[str]) -> None:
    """Print each log's last lines under its source's name."""
    _warnings(warnings)
    for log in data["logs"]:
        out.print(f"[bold]== {escape(log['source'])}[/] [dim]{escape(log['path'])}[/]")
        for line in log["lines"]:
            out.print(escape(line), soft_wrap=True, highlight=False)


def render_stop(data: dict[str, Any], warnings: list[str]) -> None:
    """Print how the server on a port ended."""
    _warnings(warnings)
    if "commands" in data:
        if data["uninstalled"]:
            out.print(f"port {data['port']}: removed {escape(data['unit_path'])} and its receipt")
        else:
            out.print(f"port {data['port']}: {data['supervisor']} runs this server; stop it with:")
        for command in data["commands"]:
            out.print(f"  [bold]{escape(shlex.join(command))}[/]", soft_wrap=True)
        return
    if data["result"] == "already_stopped":
        out.print(f"port {data['port']}: the process had already exited; removed its receipt")
    else:
        out.print(f"port {data['port']}: stopped pid {data['pid']} ({data['how']}); removed its receipt")


@contextmanager
def hash_progress(message: str) -> Iterator[None]:
    """Draw a progress bar with throughput for any full hashing done inside (``--verify-weights``)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from mlx_agent.identity import HASH_PROGRESS

    columns = (TextColumn(message), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=err, transient=False) as bar:
        task = bar.add_task(message, total=None)

        def show(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        token = HASH_PROGRESS.set(show)
        try:
            yield
        finally:
            HASH_PROGRESS.reset(token)


@contextmanager
def spinner(message: str) -> Iterator[Tick]:
    """Show a spinner with the elapsed time and the log's last line; yield the callback that updates it."""
    with err.status(message) as status:

        def tick(elapsed: float, last_line: str) -> None:
            status.update(f"{message} [dim]{elapsed:4.0f}s[/]  {escape(last_line[-100:])}")

        yield tick


def render_train_preview(data: dict[str, Any], warnings: list[str]) -> None:
    """Print the training plan a person reviews, its hash, and the command that confirms it."""
    plan = data["plan"]
    base, dataset, hp = plan["base"], plan["dataset"], plan["hyperparameters"]
    table = Table(show_header=False, title="lora train: plan (nothing started)", title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    where = base["path"] if base["kind"] == "path" else f"{base['repo']}@{base['revision']}"
    table.add_row("base", escape(where))
    total = sum(f["size"] for f in base["files"])
    table.add_row("base files", f"{len(base['files'])} bound by identity, {_size(total)}")
    files = ", ".join(f"{f['name']} ({f['lines']} lines, sha256 {f['sha256'][:12]})" for f in dataset["files"])
    table.add_row("dataset", escape(f"{dataset['path']}: {files}"))
    table.add_row("adapter", escape(plan["adapter_path"]))
    table.add_row("hyperparameters", escape(", ".join(f"{k}={v}" for k, v in hp.items())))
    versions = ", ".join(f"{k} {v}" for k, v in plan["trainer"]["versions"].items())
    table.add_row("versions", escape(versions))
    table.add_row("argv", escape(shlex.join(plan["argv"])))
    table.add_row("config", escape(f"{plan['config_path']} (written at confirm)"))
    _finish_plan(table, plan, warnings, "To start it")


def render_train_started(data: TrainingStarted, warnings: list[str]) -> None:
    """Print that a training started detached, where its receipt and log are, and how to follow it."""
    receipt = data["receipt"]
    _warnings(warnings)
    out.print(
        f"[green]started[/] training {receipt['id']} (watcher pid {receipt['watcher']['pid']})  "
        f"receipt {escape(data['receipt_path'])}  log {escape(receipt['log_path'])}"
    )
    out.print(f"Follow it with: [bold]{escape(shlex.join([*_invoked_as(), 'lora', 'status']))}[/]", soft_wrap=True)


def _loss(report: dict[str, Any] | None) -> str:
    return "-" if report is None else f"{report['loss']:.3f} @{report['iteration']}"


def render_train_status(data: dict[str, Any], warnings: list[str]) -> None:
    """Print one row per training with a progress bar and the last losses, then its adapter, log and outcome."""
    from rich.progress_bar import ProgressBar

    _warnings(warnings)
    if not data["trainings"]:
        out.print(f"No trainings have receipts in {escape(data['receipts_dir'])}.")
        return
    table = Table("id", "state", "progress", "iters", "train loss", "val loss")
    table.columns[0].no_wrap = True
    colours = {"running": "yellow", "completed": "green", "failed": "red", "interrupted": "red", "unreadable": "red"}
    notes: list[str] = []
    for t in data["trainings"]:
        state = t["state"]
        label = f"[{colours.get(state, 'white')}]{state}[/]"
        if state == "unreadable":
            table.add_row(t["id"], label, "-", "-", "-", "-")
            notes.append(f"{t['id']}: {escape(t['error']['message'])}")
            continue
        if t.get("exit_code") not in (None, 0):
            label += f" ({t.get('signal') or 'exit ' + str(t['exit_code'])})"
        done, total = t["iterations"]["done"], t["iterations"]["total"] or 0
        bar = ProgressBar(total=max(total, 1), completed=min(done, total), width=16)
        table.add_row(t["id"], label, bar, f"{done}/{total}", _loss(t["train_loss"]), _loss(t["val_loss"]))
        where = f"adapter {t.get('adapter_path') or '-'}  log {t.get('log_path') or '-'}"
        notes.append(f"{t['id']}: {escape(where)}")
        if state in ("failed", "interrupted") and t.get("reason"):
            notes.append(f"{t['id']}: {escape(t['reason'])}")
        for name, record in ((t.get("adapter") or {}).get("files") or {}).items():
            notes.append(f"{t['id']}: {escape(name)} {_size(record['size'])} sha256 {record['sha256']}")
    out.print(table)
    for note in notes:
        out.print(note, soft_wrap=True)
