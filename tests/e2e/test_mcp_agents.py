"""Claude Code, Codex and opencode, unmodified, launch a server through `mlx-agent mcp`: preview, then confirm.

Each agent runs in a network namespace with only loopback (tests/agents_support.py), with `mlx-agent mcp` as
its one MCP server, configured as docs/mcp.md shows (Claude Code: `--mcp-config`; Codex: `[mcp_servers]` in its
config.toml; opencode: `mcp` in its opencode.json), against a front the CLI serves there (`run opencode` points
opencode at it). Behind that front the model is a stand-in worker (``COPYING_MODEL``): no model that runs here
can read a hash out of its prompt and write it back (the scripted weights read only their last token), so this
one does in code exactly what the step needs and nothing else. Offered the tools, it calls `serve_preview` for
a second tiny model on another port; given that result, it calls `serve_confirm` with the same arguments and the
`preview_hash` it found in the result text; given that one, it answers. The second model is served by the real
runtime, and found running afterwards, launched by the copied hash.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agents_support import Namespace, agent_binary, claude_env, clean_env, codex_exec, codex_home, inside
from tests.conftest import LAUNCHER, Agent, fake_runtime, free_port

pytestmark = pytest.mark.e2e

ANSWER = "Launched"
SERVER = "mlx-agent"  # the MCP server's name in the config: Claude Code calls its tools mcp__mlx-agent__NAME
# Run inside the namespace: the launched server listens on its loopback, not this test's.
FETCH = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{port}/v1/models').read().decode())"
# A chat-completions worker (started as mlx_lm.server would be: --model --host --port ...) whose reply depends on
# the conversation: the first tool result's preview_hash is copied into the confirm call. TARGET (the serve
# arguments) and ANSWER are written above this text.
COPYING_MODEL = r"""
import argparse, json, re, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
p.add_argument("--host", default="127.0.0.1")
a, _ = p.parse_known_args()
HASH = re.compile(r'"preview_hash":\s*"([0-9a-f]{64})"')


def text_of(message):
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return str(content)


def offered(body, suffix):
    names = [t["function"]["name"] for t in body.get("tools") or []]
    return next((name for name in names if name.endswith(suffix)), None)


def reply(body):
    # Return (text, tool call or None): preview first, then confirm with the hash copied from the result.
    results = [m for m in body["messages"] if m.get("role") == "tool"]
    preview, confirm = offered(body, "serve_preview"), offered(body, "serve_confirm")
    if not preview and not results:
        return "No mlx-agent tools were offered", None  # the agent started without the MCP server: say so
    if not results and preview:
        return None, (preview, TARGET)
    found = HASH.search(text_of(results[-1])) if results else None
    if len(results) == 1 and found and confirm:
        return None, (confirm, {**TARGET, "preview_hash": found.group(1)})
    return ANSWER, None


class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        raw = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def send(self, doc):
        self.wfile.write(f"data: {json.dumps(doc)}\n\n".encode())
        self.wfile.flush()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text, call = reply(body)
        usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
        base = {"id": "chatcmpl-copying", "model": body.get("model")}
        turn = sum(1 for m in body["messages"] if m.get("role") == "tool")
        with open(__file__ + ".log", "a") as log:  # what it answered, for a failing test to show
            log.write(json.dumps({"tool_results": turn, "text": text, "call": call}) + "\n")
        calls = [] if call is None else [{
            "id": f"call_copying_{turn}", "type": "function",
            "function": {"name": call[0], "arguments": json.dumps(call[1])},
        }]
        finish = "tool_calls" if calls else "stop"
        if not body.get("stream"):
            message = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            doc = {**base, "object": "chat.completion", "usage": usage,
                   "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
            raw = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        base = {**base, "object": "chat.completion.chunk"}
        delta = {"role": "assistant", "content": text} if text else {
            "role": "assistant", "tool_calls": [{"index": 0, **calls[0]}]
        }
        self.send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        self.send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self.send({**base, "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


ThreadingHTTPServer((a.host, a.port), H).serve_forever()
"""


@dataclass
class Session:
    """A front serving the copying model (``port``), and the server it is to launch (``target``)."""

    port: int
    target: dict[str, Any]
    worker: Path

    @property
    def replies(self) -> list[dict[str, Any]]:
        """Return what the copying model answered, request by request."""
        log = Path(f"{self.worker}.log")
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def copying_front(cli: Agent, tiny_model: Path, tmp_path: Path) -> Session:
    """Serve the copying model through the CLI, named as hosted models are, set to launch the tiny model."""
    target = {"path": str(tiny_model), "port": free_port(), "served_model_name": "tiny", "max_tokens": 4}
    script = f"TARGET = {json.dumps(target)}\nANSWER = {json.dumps(ANSWER)}\n{COPYING_MODEL}"
    worker = fake_runtime(tmp_path, script, name="copying-model")
    model = tmp_path / "agent-model"  # the tiny model's files, its window widened: agents send long prompts
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 131072}))
    port = free_port()
    cli.launch(
        "--path", str(model), "--runtime-executable", str(worker), "--port", str(port),
        "--served-model-name", "local-coder", "--alias", "claude-*", "--alias", "gpt-*",
    )  # fmt: skip
    return Session(port, target, worker)


def mcp_server(agent: Agent) -> dict[str, Any]:
    """Return the stdio server entry that runs `mlx-agent mcp` from this checkout, on the test's home."""
    return {
        "command": sys.executable,
        "args": [str(LAUNCHER), "mcp"],
        "env": {"MLX_AGENT_HOME": agent.env["MLX_AGENT_HOME"], "HF_HOME": agent.env["HF_HOME"]},
    }


def assert_launched(cli: Agent, namespace: Namespace, session: Session) -> None:
    """Check the target runs, answers inside the namespace, and was launched by the hash the model copied."""
    target_port = session.target["port"]
    status = cli.run("serve", "status", "--port", str(target_port))
    [launched] = status.data["servers"]
    assert (launched["state"], launched["health"]) == ("running", "ok"), launched
    confirms = [r["call"][1] for r in session.replies if r["call"] and r["call"][0].endswith("serve_confirm")]
    assert [c["preview_hash"] for c in confirms] == [launched["preview_hash"]], session.replies
    fetch = [sys.executable, "-c", FETCH.format(port=target_port)]
    served = namespace.run(fetch, cli.env, cli.home, timeout=30)
    assert [m["id"] for m in json.loads(served.stdout)["data"]] == ["tiny"], served.stdout + served.stderr


def test_claude_code_previews_then_confirms_a_server_over_mcp(
    agent: Agent, tiny_model: Path, tmp_path: Path, namespace: Namespace
) -> None:
    """`claude -p` calls serve_preview, then serve_confirm with the hash the model read, and the model is served."""
    cli = inside(agent, namespace)
    session = copying_front(cli, tiny_model, tmp_path)
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {SERVER: {"type": "stdio", **mcp_server(agent)}}}))
    tools = [f"mcp__{SERVER}__serve_preview", f"mcp__{SERVER}__serve_confirm"]
    argv = [
        str(agent_binary("claude")),
        "--bare",
        "-p",
        f"Serve the tiny model on port {session.target['port']}: review its plan first, then launch it.",
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
        ",".join(tools),
        "--system-prompt",
        "You launch local model servers for the user.",
    ]
    try:
        env = claude_env(tmp_path / "claude-home", session.port, MCP_TIMEOUT="120000")  # a busy machine's start
        done = namespace.run(argv, env, tmp_path, timeout=300)
        assert done.returncode == 0, f"{done.stdout}{done.stderr}{session.replies}"
        result = json.loads(done.stdout)
        assert result["is_error"] is False and result["result"] == ANSWER, result
        assert result["num_turns"] >= 3 and result["permission_denials"] == [], result
        assert_launched(cli, namespace, session)
    finally:
        cli.run("serve", "stop", "--port", str(session.target["port"]))
        cli.run("serve", "stop", "--port", str(session.port))


def test_codex_previews_then_confirms_a_server_over_mcp(
    agent: Agent, tiny_model: Path, tmp_path: Path, namespace: Namespace
) -> None:
    """`codex exec` with mlx-agent in its config.toml's mcp_servers does the same two calls, and the model is served."""
    cli = inside(agent, namespace)
    session = copying_front(cli, tiny_model, tmp_path)
    server = mcp_server(agent)
    table = (
        f"\n[mcp_servers.{SERVER}]\ncommand = {json.dumps(server['command'])}\nargs = {json.dumps(server['args'])}\n"
        # required: the first turn waits for the server (an optional one gets a second's grace, then is left out).
        f"required = true\nstartup_timeout_sec = 120\ntool_timeout_sec = 300\n[mcp_servers.{SERVER}.env]\n"
        + "".join(f"{key} = {json.dumps(value)}\n" for key, value in server["env"].items())
    )
    home = codex_home(tmp_path / "codex-home", session.port)
    with (home / "config.toml").open("a") as config:
        config.write(table)
    env = clean_env(tmp_path, CODEX_HOME=str(home), LOCAL_API_KEY="unused")
    prompt = f"Serve the tiny model on port {session.target['port']}: review its plan first, then launch it."
    try:
        done = namespace.run(codex_exec(prompt), env, tmp_path, timeout=300)
        assert done.returncode == 0, f"{done.stdout}{done.stderr}{session.replies}"
        assert done.stdout.strip().splitlines()[-1] == ANSWER, done.stdout
        assert_launched(cli, namespace, session)
    finally:
        cli.run("serve", "stop", "--port", str(session.target["port"]))
        cli.run("serve", "stop", "--port", str(session.port))


def test_opencode_previews_then_confirms_a_server_over_mcp(
    agent: Agent, tiny_model: Path, tmp_path: Path, namespace: Namespace
) -> None:
    """`opencode run` with mlx-agent in its opencode.json's mcp does the same two calls, and the model is served."""
    cli = inside(agent, namespace)
    session = copying_front(cli, tiny_model, tmp_path)
    server = mcp_server(agent)
    entry = {
        "type": "local",
        "command": [server["command"], *server["args"]],
        "environment": server["env"],
        "timeout": 120_000,  # its wait for the server's tools (5 s by default): a busy machine starts it slower
    }
    home = tmp_path / "user"
    (home / ".config" / "opencode").mkdir(parents=True)
    (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps({"mcp": {SERVER: entry}}))
    prompt = f"Serve the tiny model on port {session.target['port']}: review its plan first, then launch it."
    run = [sys.executable, str(LAUNCHER), "run", "opencode", "--port", str(session.port)]
    run += ["--agent-bin", str(agent_binary("opencode")), "--", "run", prompt]
    try:
        done = namespace.run(run, clean_env(home, MLX_AGENT_HOME=str(cli.home)), tmp_path, timeout=300)
        assert done.returncode == 0, f"{done.stdout}{done.stderr}{session.replies}"
        assert done.stdout.strip().splitlines()[-1] == ANSWER, done.stdout
        assert_launched(cli, namespace, session)
    finally:
        cli.run("serve", "stop", "--port", str(session.target["port"]))
        cli.run("serve", "stop", "--port", str(session.port))
