"""The exception tree: stable codes, remediations, and README's table of them."""

from __future__ import annotations

import inspect
import io
import json
import re
import sys
from pathlib import Path

import pytest

import mlx_agent.errors as errors
from mlx_agent.errors import commands
from mlx_agent.wire import REFUSAL_PREFIX

pytestmark = pytest.mark.fast

README = Path(__file__).resolve().parents[2] / "README.md"


def tree_classes() -> dict[str, type[errors.MlxAgentError]]:
    """Return every class of the tree by name: the servers' in ``errors``, the commands' in ``errors.commands``."""
    return {
        cls.__name__: cls
        for module in (errors, commands)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, errors.MlxAgentError)
    }


def leaf_classes() -> list[type[errors.MlxAgentError]]:
    """Return every error class that has no subclass (the codes users see)."""
    return [cls for cls in tree_classes().values() if not cls.__subclasses__()]


def test_codes_are_unique_snake_case_with_remediation() -> None:
    """Each leaf has its own snake_case code, a one-sentence remediation and exit code 1 or 2."""
    codes = [cls.code for cls in leaf_classes()]
    assert len(codes) == len(set(codes))
    for cls in leaf_classes():
        assert re.fullmatch(r"[a-z][a-z0-9_]*", cls.code)
        assert cls.remediation.endswith(".") and cls.remediation != errors.MlxAgentError.remediation
        assert cls.exit_code in (1, 2)


def test_readme_lists_every_code_with_its_remediation() -> None:
    """README's error table names every code with the same remediation and exit code."""
    text = README.read_text()
    for cls in leaf_classes():
        assert f"| `{cls.code}` | {cls.exit_code} | {cls.remediation} |" in text, cls.code


TREE_LINE = re.compile(r"^(?P<indent>[ │├└─]*?)(?:[├└]── )?(?P<name>[A-Z][A-Za-z]+)\b[ .]*(?P<code>[a-z_]+)?")


def drawn_tree() -> dict[str, tuple[str | None, str | None]]:
    """Return each class the docstring draws in the tree with its drawn parent and code."""
    assert errors.__doc__ is not None
    text = errors.__doc__.split("Outside the tree")[0]
    lines = [line for line in text.splitlines() if line.startswith("    ") and line.strip()]
    drawn: dict[str, tuple[str | None, str | None]] = {}
    parents: list[tuple[int, str]] = []  # (depth, name) of the open branches
    for line in lines:
        body = line[4:]
        match = TREE_LINE.match(body)
        assert match is not None, line
        depth = len(match.group("indent")) // 4 + (0 if body.startswith("MlxAgentError") else 1)
        while parents and parents[-1][0] >= depth:
            parents.pop()
        drawn[match.group("name")] = (parents[-1][1] if parents else None, match.group("code"))
        parents.append((depth, match.group("name")))
    return drawn


def test_tree_is_drawn_in_the_module_docstring() -> None:
    """The docstring draws every error class under its real parent, and each leaf with its own code."""
    drawn = drawn_tree()
    classes = tree_classes()
    assert set(drawn) == set(classes)
    for name, (parent, code) in drawn.items():
        cls = classes[name]
        assert (cls.__bases__[0].__name__ if parent else None) == parent, name
        if not cls.__subclasses__() and cls is not errors.RequestRefused:
            assert code == cls.code, name


def test_a_refusal_line_is_written_whole_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal line and its newline go out in one write, so another rank's line cannot land inside it."""
    writes: list[str] = []

    class Recorder(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

    monkeypatch.setattr(sys, "stderr", Recorder())
    errors.print_refusal(errors.PortInUse("port 1 is taken"))
    assert len(writes) == 1 and writes[0].endswith("}\n") and writes[0].count("\n") == 1
    assert json.loads(writes[0].removeprefix(REFUSAL_PREFIX))["code"] == "port_in_use"


def test_no_server_process_module_imports_the_commands_errors() -> None:
    """The front's and the worker's modules import only ``mlx_agent.errors``: a command's new error stales no plan."""
    from mlx_agent.plan.front import FRONT_MODULES
    from mlx_agent.plan.runtime import WORKER_MODULES

    package = Path(errors.__file__).resolve().parents[1]
    served = [package / name for name in {*FRONT_MODULES, *WORKER_MODULES}]
    served += [*(package / "gateway").rglob("*.py"), *(package / "runtime").rglob("*.py")]
    assert "errors/commands.py" not in {*FRONT_MODULES, *WORKER_MODULES}
    importing = [str(path.relative_to(package)) for path in served if "mlx_agent.errors.commands" in path.read_text()]
    assert importing == []
