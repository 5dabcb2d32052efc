"""``serve start``'s preview tells what each model can do for agents, and refuses what cannot be served (the CLI).

The tiny model's own template renders no tools and names no parser, so its preview warns twice; a real template
given with ``--chat-template`` (Qwen3-Coder's, from the corpus) clears both. Each runs the CLI from the checkout.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from mlx_agent.plan.agent_support import NO_PARSER, NO_TOOLS
from mlx_agent.wire import PLAN_VERSION
from mlx_agent.worker_contract import split_worker_argv
from tests.conftest import Agent, assert_valid
from tests.template_corpus import TEMPLATES_DIR

QWEN_CODER = TEMPLATES_DIR / "Qwen3-Coder.jinja"


def test_the_preview_records_the_agents_part_and_warns_in_the_envelope(agent: Agent, tiny_model: Path) -> None:
    """--json: the plan's model has its agents record, and the envelope's warnings say what will not work."""
    result = agent.run("serve", "start", "--path", str(tiny_model), "--port", "18990")
    assert result.rc == 0, result.stderr
    model = result.data["plan"]["models"][0]
    assert_valid("serve_plan", result.data["plan"])
    assert result.data["plan"]["format_version"] == PLAN_VERSION
    agents = model["agents"]
    assert (agents["renders_tools"], agents["tool_parser"], agents["context_window"]) == (
        False,
        None,
        model["context_window"],
    )
    assert agents["chat_template"]["path"] == str(tiny_model / "tokenizer_config.json")
    name = model["served_model_name"]
    assert [w for w in result.doc["warnings"] if w.startswith(f"{name}: ")] == [
        f"{name}: {NO_TOOLS}",
        f"{name}: {NO_PARSER}",
    ]


def test_a_chat_template_and_a_tool_parser_reach_the_worker_and_clear_the_warnings(
    agent: Agent, tiny_model: Path
) -> None:
    """Both options land in the worker's argv, the file in the checks every load makes, and no warning is left."""
    result = agent.run(
        "serve", "start", "--path", str(tiny_model), "--port", "18990",
        "--chat-template", str(QWEN_CODER), "--tool-parser", "qwen3_coder",
    )  # fmt: skip
    assert result.rc == 0, result.stderr
    model = result.data["plan"]["models"][0]
    assert (model["agents"]["tool_parser"], model["agents"]["tool_parser_from"]) == ("qwen3_coder", "option")
    planned = split_worker_argv(model["worker"]["argv"])[0].contract
    assert planned.tool_parser == "qwen3_coder"
    assert planned.chat_template is not None and planned.chat_template.path == str(QWEN_CODER)
    assert [c["path"] for c in model["file_checks"]] == [str(QWEN_CODER)]
    assert not [w for w in result.doc["warnings"] if w.startswith(f"{model['served_model_name']}: ")]


def test_an_edited_template_file_makes_the_reviewed_plan_stale(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """The file is bound by content: edited after the preview, confirm refuses the reviewed hash."""
    path = tmp_path / "t.jinja"
    shutil.copy(QWEN_CODER, path)
    args = ("serve", "start", "--path", str(tiny_model), "--port", "18990", "--chat-template", str(path))
    reviewed = agent.preview_hash(*args[2:])
    path.write_text(path.read_text() + "\n", encoding="utf-8")
    result = agent.run(*args, "--confirm", "--preview-hash", reviewed)
    assert (result.rc, result.code) == (1, "preview_stale")


def test_an_unknown_tool_parser_is_refused_with_the_installed_names(agent: Agent, tiny_model: Path) -> None:
    """A parser that is not installed is refused at preview (invalid_arguments), listing every installed one."""
    result = agent.run("serve", "start", "--path", str(tiny_model), "--tool-parser", "hermes")
    assert (result.rc, result.code) == (2, "invalid_arguments")
    installed = result.doc["error"]["details"]["installed"]
    assert {"json_tools", "mistral", "qwen3_coder", "llama3_json", "deepseek_v3"} <= set(installed)
    assert all(name in result.doc["error"]["message"] for name in installed)


def test_a_relative_chat_template_on_the_command_line_is_refused(agent: Agent, tiny_model: Path) -> None:
    """The command line takes an absolute template path only."""
    result = agent.run("serve", "start", "--path", str(tiny_model), "--chat-template", "t.jinja")
    assert (result.rc, result.code) == (2, "invalid_arguments")
    assert result.doc["error"]["details"]["option"] == "--chat-template"


def test_mlx_vlm_takes_neither_option(agent: Agent, tiny_model: Path) -> None:
    """mlx-vlm renders with its processor's template and picks its own parser: both options are refused."""
    for option, value in (("--chat-template", str(QWEN_CODER)), ("--tool-parser", "json_tools")):
        result = agent.run("serve", "start", "--path", str(tiny_model), "--runtime", "mlx-vlm", option, value)
        assert (result.rc, result.code) == (1, "unsupported_runtime"), result.stdout
        assert result.doc["error"]["details"]["option"] == option


def test_a_models_file_reads_a_template_beside_it_per_model(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """[[model]] takes chat_template (relative to the file) and tool_parser, each model its own."""
    shutil.copy(QWEN_CODER, tmp_path / "coder.jinja")
    models = tmp_path / "models.toml"
    models.write_text(
        f'[[model]]\nname = "coder"\npath = "{tiny_model}"\nchat_template = "coder.jinja"\n\n'
        f'[[model]]\nname = "plain"\npath = "{tiny_model}"\ntool_parser = "json_tools"\n'
    )
    result = agent.run("serve", "start", "--models", str(models), "--jit", "--port", "18990")
    assert result.rc == 0, result.stdout
    coder, plain = result.data["plan"]["models"]
    assert coder["agents"]["chat_template"] == {
        "source": "file",
        "path": str(tmp_path / "coder.jinja"),
        "name": None,
        "sha256": hashlib.sha256((tmp_path / "coder.jinja").read_bytes()).hexdigest(),
        "size": (tmp_path / "coder.jinja").stat().st_size,
    }
    assert (coder["agents"]["tool_parser"], plain["agents"]["tool_parser"]) == ("qwen3_coder", "json_tools")
    assert [w.split(": ")[0] for w in result.doc["warnings"] if ": the chat template" in w] == ["plain"]


def test_human_output_shows_the_agents_row_and_the_warnings(agent: Agent, tiny_model: Path) -> None:
    """Without --json the plan table has an agents row and each warning is printed."""
    wide = Agent(agent.home, {**agent.env, "COLUMNS": "400"})  # one table row per line
    result = wide.run("serve", "start", "--path", str(tiny_model), "--port", "18990", check_json=False)
    assert result.rc == 0, result.stderr
    text = " ".join((result.stdout + result.stderr).split())
    assert "does not render tools" in text and "no tool parser" in text
    assert "no tool-call parser for this template: tool calls will arrive as text" in text
