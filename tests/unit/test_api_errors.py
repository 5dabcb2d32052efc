"""The API error codes and their bodies: one stdlib module the front, the worker and the native entry share."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from mlx_agent import api_errors, errors
from mlx_agent.api_errors import Code, Family, anthropic_body, error_body
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.fast

OPENAI_TYPES = {"invalid_request_error", "authentication_error", "permission_error", "not_found_error"}
OPENAI_TYPES |= {"conflict_error", "server_error"}


def test_every_code_is_snake_case_with_an_error_status_and_a_known_type() -> None:
    """Each code is a stable snake_case string answered with a 4xx or 5xx status and an OpenAI error type."""
    for code in Code:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", code.value), code
        assert 400 <= code.status < 600 and code.kind in OPENAI_TYPES, code
        assert (code.kind == "server_error") == (code.status >= 500), code


def test_a_code_reads_as_its_string() -> None:
    """str(), format() and JSON give the code itself, so it can stand wherever the bare string stood."""
    assert (str(Code.WORKER_FAILED), f"{Code.WORKER_FAILED}", json.dumps(Code.WORKER_FAILED)) == (
        "worker_failed",
        "worker_failed",
        '"worker_failed"',
    )
    assert {"worker_failed": 1}[Code.WORKER_FAILED] == 1  # equal to and hashed as its string


def test_codes_that_name_an_error_class_are_spelled_as_the_class() -> None:
    """The front answers these codes from mlx_agent.errors classes; both places spell each one the same way."""
    shared = {
        Code.UNLOAD_BLOCKED: errors.UnloadBlocked,
        Code.POLICY_REJECTED: errors.PolicyRejected,
        Code.ADAPTER_CHANGED: errors.AdapterChanged,
        Code.MODEL_CHANGED: errors.ModelChanged,
        Code.RUNTIME_CHANGED: errors.RuntimeChanged,
    }
    for code, cls in shared.items():
        assert cls.code == code.value, cls
    for code in (Code.INSUFFICIENT_HEADROOM, Code.MEMORY_UNKNOWN, Code.TOO_MANY_LOADED):
        found = errors.error_class(code.value)  # an eager front exits with this code when its preload is refused
        assert found is not None and found.code == code.value, code


def test_the_module_imports_only_the_standard_library_and_reads_as_python_3_9() -> None:
    """The native entry loads it by path under another environment's interpreter: no mlx_agent, no 3.11 syntax."""
    source = Path(api_errors.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source, feature_version=(3, 9))
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    names = {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for a in node.names}
    assert not any(isinstance(node, ast.Import) for node in ast.walk(tree))
    assert (modules, names) == ({"__future__", "enum", "typing"}, {"annotations", "Enum", "Any"})  # no StrEnum


def test_an_openai_body_takes_the_codes_status_and_type_unless_told() -> None:
    """The OpenAI shape has message, type, param and code; the type is the code's unless one is given."""
    assert error_body(Family.OPENAI, Code.MODEL_NOT_FOUND, "no such model", param="model") == {
        "error": {"message": "no such model", "type": "not_found_error", "param": "model", "code": "model_not_found"}
    }
    own = error_body(Family.OPENAI, "a_workers_code", "no", status=422, held_by=[])
    assert own == {
        "error": {
            "message": "no",
            "type": "invalid_request_error",
            "param": None,
            "code": "a_workers_code",
            "held_by": [],
        }
    }
    assert error_body(Family.OPENAI, None, "broke", status=503)["error"]["type"] == "server_error"


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (405, "invalid_request_error"),
        (409, "invalid_request_error"),
        (413, "request_too_large"),
        (502, "api_error"),
        (503, "api_error"),
    ],
)
def test_errors_take_anthropics_shape(status: int, kind: str) -> None:
    """An OpenAI-style error becomes Anthropic's, typed by status, keeping the code and dropping null fields."""
    doc = anthropic_body(status, {"error": {"message": "no", "type": "x", "param": None, "code": "some_code"}})
    assert doc == {"type": "error", "error": {"type": kind, "message": "no", "code": "some_code"}}
    built = error_body(Family.ANTHROPIC, "some_code", "no", status=status)
    assert built == doc


def test_an_anthropic_stream_error_has_no_code_when_none_is_given() -> None:
    """The Messages stream's error event carries the type and message only, as Anthropic's does."""
    assert error_body(Family.ANTHROPIC, None, "the worker broke off", status=502) == {
        "type": "error",
        "error": {"type": "api_error", "message": "the worker broke off"},
    }


def test_every_code_is_documented() -> None:
    """Each code appears in docs/gateway.md or docs/wrapped-server.md, where clients look them up."""
    docs = "".join(
        (REPO_ROOT / "docs" / name).read_text(encoding="utf-8") for name in ("gateway.md", "wrapped-server.md")
    )
    missing = [code.value for code in Code if f"`{code.value}`" not in docs]
    assert missing == []
