"""What a person sees without --json: the plan, the confirm command, errors with their remedy."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Agent, free_port


def test_preview_shows_plan_and_confirm_command(agent: Agent, tiny_model: Path) -> None:
    """A human preview shows the model, the hash and the exact command that confirms it."""
    port = str(free_port())
    result = agent.run("serve", "start", "--path", str(tiny_model), "--port", port, check_json=False)
    assert result.rc == 0
    preview_hash = agent.preview_hash("--path", str(tiny_model), "--port", port)
    assert preview_hash in result.stdout
    assert "--confirm --preview-hash" in result.stdout.replace("\n", " ")
    assert str(tiny_model) in result.stdout


def test_error_shows_code_and_remedy_on_stderr(agent: Agent, tmp_path: Path) -> None:
    """A human error names its code and remedy on stderr and prints nothing on stdout."""
    result = agent.run("serve", "start", "--path", str(tmp_path / "nope"), check_json=False)
    assert result.rc == 1
    assert result.stdout == ""
    assert "model_not_local" in result.stderr and "remedy" in result.stderr


def test_usage_error_exits_2(agent: Agent) -> None:
    """A bad option value is a usage error with exit code 2."""
    result = agent.run("serve", "stop", "--port", "70000", check_json=False)
    assert result.rc == 2
    assert "70000" in result.stderr


def test_status_table_lists_no_servers(agent: Agent) -> None:
    """Status with no receipts says so in words."""
    result = agent.run("serve", "status", check_json=False)
    assert result.rc == 0 and "No servers" in result.stdout


def test_preview_says_whether_each_acceleration_applies(agent: Agent, tiny_model: Path) -> None:
    """Asked-for prompt lookup shows as applying here, and the M5 kernel as native MLX with its first reason."""
    args = ("serve", "start", "--path", str(tiny_model), "--prompt-lookup", "--m5-prefill")
    result = agent.run(*args, check_json=False)
    assert result.rc == 0, result.stderr
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.stdout.splitlines()
        if line.count("│") >= 3
    }
    assert rows["prompt lookup"] == "applies"
    assert rows["M5 prefill"].startswith("native MLX: needs macOS 26.0+")
