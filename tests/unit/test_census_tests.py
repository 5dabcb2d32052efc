"""scripts/census_tests.py: which kind each process of a run is, and which tests were slowest."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.census_support import census_module

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("cmdline", "kind"),
    [
        ("/r/.venv/bin/python -m mlx_agent.runtime mlx_lm --model /tmp/pytest-of-root/test_cli0/m", "worker"),
        (
            "/r/.venv/bin/python -m mlx_agent.runtime.distributed.launcher -n 2 --backend ring -- env python -m x",
            "launcher",
        ),
        (
            "/r/.venv/bin/mlx.launch -n 2 --backend ring -- env /r/.venv/bin/python -m mlx_agent.runtime mlx_lm",
            "launcher",
        ),
        ("/r/.venv/bin/python -m mlx_agent.gateway --config /h/receipts/serve/8080.front.json", "front"),
        ("ip netns exec t1 /r/.venv/bin/python /r/scripts/mlx-agent serve start --path /tmp/pytest-of-root/m", "cli"),
        ("node /r/.cache/agents/node_modules/.bin/claude -p hello", "agent"),
        ("/r/.venv/bin/python /tmp/pytest-of-root/test_hang0/mlx_lm.server --model m --port 9", "stand-in"),
        ("/r/.venv/bin/python /tmp/pytest-of-root/test_front0/fake_worker.py --port 9", "stand-in"),
        ("/r/.venv/bin/python -c import sys;exec(eval(sys.stdin.readline()))", "pytest"),
        ("tmux -S /tmp/pytest-of-root/test_session0/tmux new-session -d", "other"),
        ("bash -c exec /r/.venv/bin/python -m mlx_agent.runtime mlx_lm --model m", "other"),
    ],
)
def test_each_process_is_counted_by_what_it_runs(cmdline: str, kind: str) -> None:
    """A command line's kind is the program it runs, not a test's name that one of its paths mentions."""
    assert census_module().Census(root=1).kind_of(cmdline, ppid=1) == kind


def test_what_an_agent_starts_is_the_agent_s() -> None:
    """A process an agent starts (a shell, a search) counts as the agent's; the same under a test is other."""
    census = census_module()
    run = census.Census(root=1)
    run.procs[(2, 0)] = census.Proc("agent", 1)
    run.live[2] = (2, 0)
    assert run.kind_of("/usr/bin/rg --files", ppid=2) == "agent"
    assert run.kind_of("/usr/bin/rg --files", ppid=1) == "other"


def test_the_slowest_tests_come_from_the_junit_report(tmp_path: Path) -> None:
    """The report's test cases, longest first, cut to the count asked; a missing report gives none."""
    junit = tmp_path / "junit.xml"
    cases = "".join(f'<testcase classname="tests.unit.t" name="test_{i}" time="{i}.5"/>' for i in range(5))
    junit.write_text(f"<testsuites><testsuite>{cases}</testsuite></testsuites>")
    slowest = census_module().slowest
    assert slowest(junit, 2) == [(4.5, "tests.unit.t::test_4"), (3.5, "tests.unit.t::test_3")]
    assert slowest(tmp_path / "none.xml") == []
    assert slowest(junit, 1, by_file=True) == [(12.5, "tests/unit/t.py")]


def test_assert_statements_are_counted_in_every_python_file_below_the_folder(tmp_path: Path) -> None:
    """Each assert statement counts once, in test and support modules alike; an assert in a string does not."""
    (tmp_path / "e2e").mkdir()
    (tmp_path / "test_a.py").write_text("def test_a():\n    assert 1\n    assert 2, 'two'\n")
    (tmp_path / "e2e" / "support.py").write_text("def check(x):\n    assert x\n    return 'assert x'\n")
    (tmp_path / "notes.txt").write_text("assert nothing\n")
    assert census_module().assert_statements(tmp_path) == 3


def test_a_fork_counts_as_what_it_execs() -> None:
    """A child seen with its parent's command line (forked, not yet exec'd) is read again: it counts as what it runs."""
    census = census_module()
    run = census.Census(root=1)
    runner = census.Proc("pytest", 0)
    run.procs[(1, 0)] = runner
    run.live[1] = (1, 0)
    forked = census.Proc(run.kind_of("/r/.venv/bin/python -m pytest -n 6", ppid=1), 1)
    assert forked.kind == "pytest" and run.provisional(forked)
    settled = census.Proc(run.kind_of("/r/.venv/bin/python -m mlx_agent.runtime mlx_lm --model m", ppid=1), 1)
    assert settled.kind == "worker" and not run.provisional(settled)
