"""The exception tree: stable codes, remediations, and README's table of them."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import mlx_agent.errors as errors

README = Path(__file__).resolve().parents[2] / "README.md"


def leaf_classes() -> list[type[errors.MlxAgentError]]:
    """Return every error class that has no subclass (the codes users see)."""
    return [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
            if issubclass(cls, errors.MlxAgentError) and not cls.__subclasses__()]


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


def test_tree_is_drawn_in_the_module_docstring() -> None:
    """The module docstring draws every leaf code."""
    assert errors.__doc__ is not None
    for cls in leaf_classes():
        assert cls.code in errors.__doc__
