"""Claude Code, unmodified, launches a server through `mlx-agent mcp`: it previews the plan, then confirms it.

Claude Code runs in a network namespace with only loopback (tests/agents_support.py) against a scripted model
served by the CLI, with `mlx-agent mcp` as its one MCP server (`--mcp-config`). The model's first turn calls
`serve_preview` for a second tiny model on another port, its second turn (after that result) calls
`serve_confirm` with the plan's hash, and its third answers. The scripted weights read only the last token, so
they cannot copy the hash out of the result: the call carries the hash of the same plan, previewed by the CLI
before the model is built (a plan is deterministic: that is what makes it reviewable), and the test checks that
the preview result Claude Code put in the model's prompt holds that hash.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.agents_support import (
    Namespace,
    agent_binary,
    claude_env,
    inside,
    request_lines,
    serve,
    session_model,
)
from tests.conftest import LAUNCHER, Agent, free_port

pytestmark = pytest.mark.e2e

ANSWER = "Launched"
SERVER = "mlx-agent"  # the MCP server's name in the config: Claude Code calls its tools mcp__mlx-agent__NAME
PREVIEW, CONFIRM = f"mcp__{SERVER}__serve_preview", f"mcp__{SERVER}__serve_confirm"
# Run inside the namespace: the launched server listens on its loopback, not this test's.
FETCH = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/v1/models').read().decode())"


def test_claude_code_previews_then_confirms_a_server_over_mcp(
    agent: Agent, tiny_model: Path, tmp_path: Path, namespace: Namespace
) -> None:
    """`claude -p` calls serve_preview, then serve_confirm with the plan's hash, and the tiny model is served."""
    cli = inside(agent, namespace)
    target_port = free_port()
    target = {"path": str(tiny_model), "port": target_port, "served_model_name": "tiny", "max_tokens": 4}
    plan_hash = cli.preview_hash(
        "--path", str(tiny_model), "--port", str(target_port), "--served-model-name", "tiny", "--max-tokens", "4"
    )
    calls = [(PREVIEW, target), (CONFIRM, {**target, "preview_hash": plan_hash})]
    port = serve(cli, session_model(tmp_path / "model", calls, ANSWER), ["--log-prompts"], None, tmp_path)
    config = tmp_path / "mcp.json"
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": [str(LAUNCHER), "mcp"],
        "env": {"MLX_AGENT_HOME": agent.env["MLX_AGENT_HOME"], "HF_HOME": agent.env["HF_HOME"]},
    }
    config.write_text(json.dumps({"mcpServers": {SERVER: server}}))
    argv = [
        str(agent_binary("claude")),
        "--bare",
        "-p",
        f"Serve the tiny model on port {target_port}: review its plan first, then launch it.",
        "--output-format",
        "json",
        "--model",
        "claude-sonnet-4-5",
        "--mcp-config",
        str(config),
        "--strict-mcp-config",
        "--tools",
        "",
        "--allowedTools",
        f"{PREVIEW},{CONFIRM}",
        "--system-prompt",
        "You launch local model servers for the user.",
    ]
    try:
        done = namespace.run(argv, claude_env(tmp_path / "claude-home", port), tmp_path, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        result = json.loads(done.stdout)
        assert result["is_error"] is False and result["result"] == ANSWER, result
        assert result["num_turns"] >= 3 and result["permission_denials"] == [], result

        status = cli.run("serve", "status", "--port", str(target_port))
        [launched] = status.data["servers"]
        state = (launched["state"], launched["health"], launched["preview_hash"])
        assert state == ("running", "ok", plan_hash), launched
        served = namespace.run([sys.executable, "-c", FETCH.format(port=target_port)], agent.env, tmp_path, timeout=30)
        assert [m["id"] for m in json.loads(served.stdout)["data"]] == ["tiny"], served.stdout + served.stderr

        prompts = [line.get("prompt") or [] for line in request_lines(cli, port)]
        results = [m["content"] for prompt in prompts for m in prompt if m.get("role") == "tool"]
        assert any(plan_hash in str(content) for content in results), results  # the preview's hash reached the model
    finally:
        cli.run("serve", "stop", "--port", str(target_port))
        cli.run("serve", "stop", "--port", str(port))
