"""``serve top``: a live view of every server of this home, refreshed each second, or JSON lines for agents.

The view is drawn by ``top_view`` from ``supervise.top.snapshot``; ``q`` or Ctrl-C (both read from the
terminal as keys, without waiting for Enter) leaves it with exit 0. ``--json`` writes one snapshot per refresh
as one compact JSON object on its own line (no envelope: a stream, not a result), which is the machine mode in
place of a ``serve status --watch``; ``--once`` or ``--iterations N`` stop it.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click

from mlx_agent.home import receipts_dir

QUIT_KEYS = ("q", "Q", "\x03")  # Ctrl-C too: the view reads it as a key (no signal to the shell around it)


@contextlib.contextmanager
def keys() -> Iterator[bool]:
    """Read the terminal a key at a time while the view runs (yield whether stdin is a terminal)."""
    if not sys.stdin.isatty():
        yield False
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        modes = termios.tcgetattr(fd)
        modes[3] &= ~termios.ISIG  # Ctrl-C arrives as a key: top ends with 0 and its shell goes on
        termios.tcsetattr(fd, termios.TCSANOW, modes)
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def wait_for_quit(seconds: float, terminal: bool) -> bool:
    """Wait up to ``seconds``; say whether ``q`` was pressed meanwhile."""
    if not terminal:
        time.sleep(seconds)
        return False
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([sys.stdin], [], [], left)
        if readable and os.read(sys.stdin.fileno(), 1).decode(errors="replace") in QUIT_KEYS:
            return True
    return False


def json_lines(directory: Path, interval: float, count: int | None) -> None:
    """Write a snapshot per refresh as one JSON line, ``count`` times (forever without one)."""
    from mlx_agent.supervise.top import snapshot

    done = 0
    while count is None or done < count:
        if done:
            time.sleep(interval)
        sys.stdout.write(json.dumps(snapshot(directory), ensure_ascii=False, separators=(",", ":")) + "\n")
        sys.stdout.flush()
        done += 1


def live(directory: Path, interval: float, count: int | None) -> None:
    """Draw the view, refreshed every ``interval`` s, until ``q``, Ctrl-C or ``count`` refreshes."""
    from rich.console import Console
    from rich.live import Live

    from mlx_agent.cli.top_view import render
    from mlx_agent.supervise.top import snapshot

    console = Console()
    done = 0
    with keys() as terminal, Live(console=console, screen=True, auto_refresh=False) as view:
        while count is None or done < count:
            view.update(render(snapshot(directory), console.width), refresh=True)
            done += 1
            if (count is not None and done >= count) or wait_for_quit(interval, terminal):
                break


@click.command("top")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per refresh, each on its own line.")
@click.option("--once", is_flag=True, help="Show one refresh, then exit.")
@click.option("--iterations", type=click.IntRange(min=1), default=None, help="Refreshes before exiting.")
@click.option(
    "--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True, help="Seconds between refreshes."
)
@click.option(
    "--receipts-dir", "receipts_dir_", default=None, help="Where the servers' receipts are [$MLX_AGENT_HOME]."
)
def top(as_json: bool, once: bool, iterations: int | None, interval: float, receipts_dir_: str | None) -> None:
    """Watch every server of this home live: states, progress, memory, requests, tokens/s (q quits)."""
    directory = receipts_dir("serve", receipts_dir_)
    count = 1 if once else iterations
    try:
        if as_json:
            json_lines(directory, interval, count)
        elif once:
            from rich.console import Console

            from mlx_agent.cli.top_view import render
            from mlx_agent.supervise.top import snapshot

            console = Console()
            console.print(render(snapshot(directory), console.width))
        else:
            live(directory, interval, count)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # a reader of the JSON lines that went away (head -n 3)
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115  # Python flushes stdout at exit
