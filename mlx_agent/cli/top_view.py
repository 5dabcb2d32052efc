"""The rich table ``serve top`` draws from a snapshot (``supervise/top.py``): one row per model of each server.

Pure: a snapshot and a width in, a renderable out, so the tests read what a person sees without a terminal.
A column the terminal is too narrow for is left out, the sparkline of tokens/s first, then the last error, then
the counters in ``DROPPED_FIRST``'s order; the server, model and state columns always show whole (an 80-column
terminal shows a model's name, not three letters of it).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

SPARKS = "▁▂▃▄▅▆▇█"
SPARK_SECONDS = 30  # the sparkline's last seconds, one character each
WIDE = 150  # from this width the sparkline is drawn
MEDIUM = 120  # from this width the last error is shown
KEPT = ("PORT", "MODE", "MODEL", "STATE")  # never left out, never shortened
# The counters a narrow terminal loses, first to last; what is left shows whole.
DROPPED_FIRST = ("VLM CACHE", "EVICT", "PREFILL/S", "CACHE", "TTFT", "LOADS", "MEM/EST", "REQ/WAIT", "TOK/S")
GAP = 2  # the table's padding between two columns
STATE_STYLES = {
    "loaded": "green",
    "busy": "cyan",
    "loading": "yellow",
    "unloaded": "dim",
    "failed": "bold red",
    "wedged": "bold red",
}


def sparkline(series: list[int], width: int = SPARK_SECONDS) -> str:
    """Return the last ``width`` values as bars scaled to their largest; a second with none is a space."""
    values = [max(0, v) for v in series[-width:]]
    top = max(values, default=0)
    if top == 0:
        return " " * len(values)
    return "".join(" " if v == 0 else SPARKS[min(len(SPARKS) - 1, (v * len(SPARKS) - 1) // top)] for v in values)


def size(value: int | None) -> str:
    """Return a byte count as GB or MB (decimal, as the plan's memory figures are)."""
    if value is None:
        return "-"
    if value >= 1e9:
        return f"{value / 1e9:.1f}G"
    return f"{value / 1e6:.0f}M"


def percent(fraction: float | None) -> str:
    """Return a fraction as a whole percentage, or a dash."""
    return "-" if fraction is None else f"{fraction * 100:.0f}%"


def state_text(model: dict[str, Any]) -> Text:
    """Return a model's state as shown: its own, ``busy`` while it works, with a load's or prefill's progress."""
    state = model.get("model_state") or "unknown"
    detail = ""
    if state == "loading" and model.get("load_progress") is not None:
        detail = f" {percent(model['load_progress'])}"
    elif state == "loaded" and model.get("prefill"):
        state, detail = "busy", f" prefill {percent(model['prefill']['fraction'])}"
    elif state == "loaded" and model.get("in_flight"):
        state = "busy"
    return Text(state + detail, style=STATE_STYLES.get(state, ""))


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def vlm_caches(caches: dict[str, Any] | None) -> str:
    """Return an mlx-vlm model's caches in a cell: ``apc 3 hit 12/2048 blk, vision 20`` (``-`` for other models)."""
    if not caches:
        return "-"
    prefix = caches.get("prefix") or {}
    if not prefix.get("enabled"):
        apc = "apc off"
    elif prefix.get("lookups_hit") is None:
        apc = "apc idle" if prefix.get("loaded") is False else "apc ?"
    else:
        apc = f"apc {prefix['lookups_hit']} hit {prefix.get('pool_used')}/{prefix.get('num_blocks')} blk"
    return f"{apc}, vision {caches.get('vision_cache_size')}"


def render(snapshot: dict[str, Any], width: int) -> RenderableType:
    """Return the view of ``snapshot`` for a terminal ``width`` columns wide."""
    memory = snapshot.get("machine_memory") or {}
    servers = snapshot.get("servers") or []
    header = Text(
        f"mlx-agent serve top  {snapshot.get('time', '')}  memory {size(memory.get('available_bytes'))} free "
        f"of {size(memory.get('total_bytes'))}  {len(servers)} server(s)  q to quit",
        style="bold",
    )
    columns = ["PORT", "MODE", "MODEL", "STATE", "MEM/EST", "REQ/WAIT", "TOK/S", "TTFT", "CACHE", "PREFILL/S"]
    columns += ["LOADS", "EVICT", "VLM CACHE"]
    show_error, show_spark = width >= MEDIUM, width >= WIDE
    if show_error:
        columns.append("LAST ERROR")
    if show_spark:
        columns.append("TOK/S 30s")
    rows: list[list[RenderableType]] = []
    for server in servers:
        models = server.get("models") or [{}]
        for index, model in enumerate(models):
            first = index == 0
            waiting = model.get("waiting")
            error = model.get("last_error") or {}
            row: list[RenderableType] = [
                str(server.get("port")) if first else "",
                str(server.get("mode") or "-") if first else "",
                str(model.get("name") or "-"),
                state_text(model) if model.get("model_state") else Text(server.get("state") or "-", style="dim"),
                f"{size(model.get('worker_rss_bytes'))}/{size(model.get('memory_estimate_bytes'))}",
                f"{model.get('in_flight', 0)}/{'-' if waiting is None else waiting}",
                _number(model.get("tokens_per_second")),
                "-" if model.get("ttft_ms") is None else f"{model['ttft_ms']:.0f}ms",
                percent(model.get("cache_hit_share")),
                _number(model.get("prefill_tokens_per_second"), 0),
                str(model.get("loads", "-")),
                str(model.get("evictions", "-")),
                vlm_caches(model.get("caches")),
            ]
            if show_error:
                row.append(Text(error.get("code") or (server.get("error") if first else None) or "", style="red"))
            if show_spark:
                row.append(sparkline(model.get("tokens_series") or []))
            rows.append(row)
    shown = fitting(columns, rows, width)
    table = Table(expand=False, pad_edge=False, box=None, header_style="bold")
    for i in shown:
        name = columns[i]
        kept = name in KEPT
        table.add_column(
            name,
            no_wrap=True,
            overflow="fold" if kept else "ellipsis",
            min_width=natural_width(name, [r[i] for r in rows]) if kept else None,
            max_width=40 if name == "LAST ERROR" else None,
        )
    for r in rows:
        table.add_row(*(r[i] for i in shown))
    if not servers:
        return Group(header, Text("no servers in this home (mlx-agent serve start ... --confirm starts one)"))
    return Group(header, table)


def natural_width(header: str, cells: list[RenderableType]) -> int:
    """Return the width a column takes to show its header and every cell whole."""
    return max([len(header), *(len(c.plain if isinstance(c, Text) else str(c)) for c in cells)])


def fitting(columns: list[str], rows: list[list[RenderableType]], width: int) -> list[int]:
    """Return the indexes of the columns to draw: all, less the last error, then ``DROPPED_FIRST``, until they fit."""
    shown = list(range(len(columns)))
    widths = [natural_width(name, [r[i] for r in rows]) for i, name in enumerate(columns)]
    order = [columns.index(n) for n in ("TOK/S 30s", "LAST ERROR", *DROPPED_FIRST) if n in columns]
    while order and sum(widths[i] for i in shown) + GAP * (len(shown) - 1) > width:
        shown.remove(order.pop(0))
    return shown
