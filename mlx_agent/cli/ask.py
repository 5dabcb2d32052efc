"""The one question a person at a terminal is asked after a preview: ``Launch this plan? [y/N]``.

Only on a terminal (stdin and stdout both a TTY) and without ``--json`` or ``--confirm``: there a preview is
printed and then asked about once, and a yes confirms exactly the plan shown, by its ``preview_hash``, through
the command's own ``--confirm --preview-hash`` path (the plan is rebuilt and compared, so one that changed while
the question waited is refused ``preview_stale``). Anything but yes launches nothing and exits 1. Everywhere
else (an agent's ``--json``, a pipe, no terminal) nothing is asked and the two steps stay as they were.
"""

from __future__ import annotations

import sys

from mlx_agent.cli.output import run

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

YES = ("y", "yes")
DECLINED = 1  # the exit status of an answer other than yes: refused, as a stale confirm is


def wants_answer(as_json: bool, confirm: bool, stdin_tty: bool, stdout_tty: bool) -> bool:
    """Say whether a preview asks its question: a person's terminal, no --json, and no --confirm already given."""
    return not as_json and not confirm and stdin_tty and stdout_tty


def on_terminal() -> tuple[bool, bool]:
    """Return whether stdin and stdout are each a terminal (a closed one is not)."""

    def tty(stream: Any) -> bool:
        try:
            return bool(stream is not None and stream.isatty())
        except (ValueError, OSError):
            return False

    return tty(sys.stdin), tty(sys.stdout)


def answered_yes(question: str) -> bool:
    """Ask ``question`` once on the terminal; only y or yes (any case) is a yes, end of input is a no."""
    sys.stdout.write(question)
    sys.stdout.flush()
    line = sys.stdin.readline()
    return line.strip().lower() in YES


def preview_and_ask(
    operation: str,
    as_json: bool,
    verb: str,
    preview: Callable[[], tuple[Any, list[str]]],
    render: Callable[[Any, list[str]], None],
) -> str | None:
    """Run a command's preview as it always runs; on a person's terminal, ask and return the hash to confirm.

    Returns None where nothing is asked (the preview stands as the first of two steps). A preview that fails
    exits in ``run`` as before. An answer other than yes exits 1 with one line saying nothing was done.
    """
    if not wants_answer(as_json, False, *on_terminal()):  # called for a preview: no --confirm given
        run(operation, as_json, preview, render)
        return None
    shown: list[str] = []

    def show(data: Any, warnings: list[str]) -> None:
        render(data, warnings)
        shown.append(str(data["plan"]["preview_hash"]))

    run(operation, as_json, preview, show)
    if answered_yes(f"{verb} this plan? [y/N] "):
        return shown[0]
    sys.stderr.write(f"not confirmed: nothing was done (to confirm later: --confirm --preview-hash {shown[0]})\n")
    sys.stderr.flush()
    sys.exit(DECLINED)
