"""The decision to ask a person once after a preview, and the reading of the answer."""

from __future__ import annotations

import io
import itertools

import pytest

from mlx_agent.cli.ask import answered_yes, on_terminal, wants_answer

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("as_json", "confirm", "stdin_tty", "stdout_tty"), list(itertools.product([False, True], repeat=4))
)
def test_only_a_terminal_without_json_or_confirm_is_asked(
    as_json: bool, confirm: bool, stdin_tty: bool, stdout_tty: bool
) -> None:
    """Of the sixteen cases only a terminal at both ends, without --json and without --confirm, is asked."""
    expected = (as_json, confirm, stdin_tty, stdout_tty) == (False, False, True, True)
    assert wants_answer(as_json, confirm, stdin_tty, stdout_tty) is expected


def test_pipes_and_a_closed_stream_are_not_terminals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipes are not terminals, and neither is a closed stdin (isatty raises) nor a missing one."""
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr("sys.stdin", closed)
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert on_terminal() == (False, False)
    monkeypatch.setattr("sys.stdin", None)
    assert on_terminal() == (False, False)


@pytest.mark.parametrize(
    ("typed", "yes"),
    [("y\n", True), ("YES\n", True), (" yes \n", True), ("\n", False), ("n\n", False), ("yep\n", False), ("", False)],
)
def test_only_y_or_yes_is_a_yes(monkeypatch: pytest.MonkeyPatch, typed: str, yes: bool) -> None:
    """Answers y and yes (any case) are a yes; Enter, no, anything else and end of input are a no; one line is read."""
    shown = io.StringIO()
    monkeypatch.setattr("sys.stdin", io.StringIO(typed + ("y\n" if typed else "")))  # a second line: never read
    monkeypatch.setattr("sys.stdout", shown)
    assert answered_yes("Launch this plan? [y/N] ") is yes
    assert shown.getvalue() == "Launch this plan? [y/N] "
