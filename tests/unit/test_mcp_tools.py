"""The MCP tool table: schemas read off the Click commands, and the argv each call becomes (no process, no SDK)."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest

from mlx_agent.cli.app import cli
from mlx_agent.cli.mcp_tools import BY_NAME, CONFIRM, PREVIEW, TOOLS, Tool, command_of, input_schema
from mlx_agent.cli.mcp_tools import argv as tool_argv
from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import RuntimeNotInstalled
from mlx_agent.plan.requests import COMMANDS

pytestmark = pytest.mark.fast


def argv(tool: Tool, arguments: dict[str, Any] | None) -> list[str]:
    """Return the command line of ``tool`` in the CLI's own tree (what the server hands the table)."""
    return tool_argv(tool, arguments, cli)


def test_the_tools_are_the_issued_operations() -> None:
    """The table holds the CLI's operations by the names agents call, pull's two steps included."""
    assert [t.name for t in TOOLS] == [
        "models",
        "serve_preview",
        "serve_confirm",
        "status",
        "stop",
        "unload",
        "logs",
        "wire_preview",
        "wire_confirm",
        "pull_preview",
        "pull_confirm",
    ]
    for tool in TOOLS:
        assert command_of(tool, cli).name == tool.command[-1]


def test_serve_tools_take_every_option_of_serve_start() -> None:
    """serve_preview's arguments are serve start's record options by field name; only confirm adds preview_hash."""
    record = {opt.dest for opt in COMMANDS[("serve", "start")].record.OPTIONS if opt.scope != "file"}
    preview = input_schema(BY_NAME["serve_preview"], cli)
    confirm = input_schema(BY_NAME["serve_confirm"], cli)
    assert set(preview["properties"]) == record
    assert set(confirm["properties"]) == record | {"preview_hash"}
    assert confirm["required"] == ["preview_hash"] and preview["required"] == []
    assert preview["additionalProperties"] is False
    port = preview["properties"]["port"]
    assert (port["type"], port["minimum"], port["maximum"]) == ("integer", 1, 65535)
    assert preview["properties"]["alias"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "Another name clients may use; a glob such as 'claude-*' (repeatable).",
    }
    assert preview["properties"]["thinking"]["enum"] == ["on", "off"]
    assert preview["properties"]["ready_timeout"]["exclusiveMinimum"] == 0


def test_a_step_flag_or_a_left_out_option_is_no_argument() -> None:
    """--json, --confirm and --preview-hash are the step's own; logs cannot --follow (it never returns)."""
    for tool in TOOLS:
        props = input_schema(tool, cli)["properties"]
        assert not {"json", "as_json", "confirm"} & set(props)
        assert ("preview_hash" in props) == (tool.step == CONFIRM)
    assert "follow" not in input_schema(BY_NAME["logs"], cli)["properties"]
    assert input_schema(BY_NAME["stop"], cli)["required"] == ["port"]
    assert input_schema(BY_NAME["unload"], cli)["required"] == ["port", "expected_pid"]


def test_arguments_are_named_as_the_flags_a_person_types() -> None:
    """The flag `models --dir` is the argument `dir`, `wire --default` is `default`, whatever Click names them."""
    assert set(input_schema(BY_NAME["models"], cli)["properties"]) == {"dir", "receipts_dir"}
    wire = input_schema(BY_NAME["wire_preview"], cli)
    assert set(wire["properties"]) == {"agent", "port", "model", "scope", "default", "receipts_dir"}
    assert wire["required"] == ["agent", "port"]
    assert argv(BY_NAME["models"], {"dir": ["/a"]}) == ["models", "--dir=/a", "--json"]
    assert argv(BY_NAME["wire_preview"], {"agent": "codex", "port": 9, "default": True}) == [
        "wire", "agent", "--port=9", "--default", "--json", "--", "codex",
    ]  # fmt: skip


def test_arguments_become_the_command_line() -> None:
    """Options go as --flag=value (repeated for a list), true flags bare, the step's flags after, positionals last."""
    given = {"path": "/m", "alias": ["a", "-b"], "jit": True, "prompt_lookup": False}
    assert argv(BY_NAME["serve_preview"], given) == [
        "serve", "start", "--path=/m", "--alias=a", "--alias=-b", "--jit", "--json",
    ]  # fmt: skip
    assert argv(BY_NAME["serve_confirm"], {"port": 8081, "preview_hash": "ab12"}) == [
        "serve", "start", "--port=8081", "--confirm", "--preview-hash=ab12", "--json",
    ]  # fmt: skip
    assert argv(BY_NAME["serve_confirm"], {}) == ["serve", "start", "--confirm", "--json"]  # the command refuses
    assert argv(BY_NAME["wire_preview"], {"agent": "--confirm", "port": 9}) == [
        "wire", "agent", "--port=9", "--json", "--", "--confirm",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("arguments", "details"),
    [
        ({"port": 1, "force": True}, {"unknown": ["force"], "arguments": ["port", "receipts_dir", "uninstall"]}),
        ({"port": "8080"}, {"argument": "port", "expected": "integer"}),
        ({"port": True}, {"argument": "port", "expected": "integer"}),
        ({"port": 1, "uninstall": "yes"}, {"argument": "uninstall", "expected": "boolean"}),
        ({"port": 1, "receipts_dir": "/a\x00b"}, {"argument": "receipts_dir"}),
    ],
)
def test_an_unknown_or_ill_typed_argument_is_refused(arguments: dict[str, object], details: dict[str, object]) -> None:
    """The tool refuses what its schema does not allow, before any command runs (invalid_arguments)."""
    with pytest.raises(InvalidArguments) as refused:
        argv(BY_NAME["stop"], arguments)
    assert refused.value.details == details


def test_a_new_row_is_a_tool() -> None:
    """A row naming any command of the tree is a tool with that command's options."""
    tool = Tool("train_preview", ("lora", "train"), PREVIEW)
    props = input_schema(tool, cli)["properties"]
    assert {"data", "adapter_path", "iters"} <= set(props)
    assert argv(tool, {"data": "/d", "iters": 3})[-4:] == ["train", "--data=/d", "--iters=3", "--json"]


def test_pull_tools_take_the_repo_and_its_options_and_step() -> None:
    """pull_preview and pull_confirm take the repo and pull's options; only the confirm carries the hash."""
    preview, confirm = BY_NAME["pull_preview"], BY_NAME["pull_confirm"]
    schema = input_schema(confirm, cli)
    assert {"repo", "revision", "allow_code", "preview_hash"} <= set(schema["properties"])
    assert "repo" in schema["required"] and "preview_hash" in schema["required"]
    assert "preview_hash" not in input_schema(preview, cli)["properties"]
    assert preview.read_only and not confirm.read_only
    assert argv(preview, {"repo": "org/name", "revision": "v2"}) == [
        "pull",
        "--revision=v2",
        "--json",
        "--",
        "org/name",
    ]


def test_without_the_sdk_the_server_is_refused_with_its_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """`mlx-agent mcp` without the mcp extra says runtime_not_installed and how to install it."""
    from mlx_agent.cli.mcp_server import serve_stdio

    monkeypatch.setitem(sys.modules, "mcp.server.stdio", None)
    with pytest.raises(RuntimeNotInstalled) as refused:
        serve_stdio(cli)
    assert refused.value.details["install_command"] == "pip install 'mlx-agent[mcp]'"
    assert "mlx-agent[mcp]" in refused.value.remediation


def test_a_command_from_a_checkout_imports_this_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool's command finds the checkout the server runs from first on its path; an installed one adds nothing."""
    from mlx_agent.cli import mcp_server

    monkeypatch.setattr(mcp_server, "checkout_root", lambda: "/src/mlx-agent")
    assert mcp_server.command_env({"PYTHONPATH": "/other", "X": "1"}) == {
        "PYTHONPATH": "/src/mlx-agent:/other",
        "X": "1",
    }
    assert mcp_server.command_env({})["PYTHONPATH"] == "/src/mlx-agent"
    monkeypatch.setattr(mcp_server, "checkout_root", lambda: None)
    assert mcp_server.command_env({"X": "1"}) == {"X": "1"}


@pytest.mark.parametrize(
    ("stdout", "rc"),
    [("Traceback (most recent call last):", 1), ('{"status": "ok"}', 1), ('{"status": "error"}', 0), ("[]", 0)],
)
def test_a_command_without_its_envelope_is_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, stdout: str, rc: int
) -> None:
    """A command that printed no envelope, or one its exit status contradicts, comes back as internal_error."""
    import subprocess

    from mlx_agent.cli import mcp_server

    def finished(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, rc, stdout, "boom\n")

    monkeypatch.setattr(subprocess, "run", finished)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    text, failed = mcp_server.run_tool(BY_NAME["status"], {}, cli)
    doc = json.loads(text)
    assert failed and doc["operation"] == "serve.status" and doc["status"] == "error"
    assert doc["error"]["code"] == "internal_error" and doc["error"]["details"] == {"exit_code": rc, "stderr": "boom\n"}


def test_a_command_that_reports_progress_answers_with_its_envelope_alone() -> None:
    """Progress lines before the envelope (pull --confirm --json) are left out of the tool's result."""
    from mlx_agent.cli.mcp_server import last_document

    envelope = '{\n  "status": "ok",\n  "data": {}\n}'
    stdout = '{"file": "a", "done_bytes": 1}\n{"file": "b", "done_bytes": 2}\n' + envelope + "\n"
    assert last_document(stdout) == (envelope, {"status": "ok", "data": {}})
    with pytest.raises(ValueError):
        last_document("  \n")
