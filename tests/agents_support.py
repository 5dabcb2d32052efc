"""Real coding agents (Claude Code, Codex CLI) in a network namespace that has only loopback.

``scripts/install`` puts the pinned agents (``AGENT_PACKAGES``) in ``.cache/agents`` with npm. A test makes a
namespace (``ip netns``: it needs root, which CI has), starts the front inside it through the CLI, and runs
the agent inside it too, so neither can reach anything but this machine's loopback in that namespace.

The agents talk to a scripted tiny model (``scripted_agent_model``): offered tools with the user's question
last, it calls one given tool with given arguments; given a tool's result, it answers with a given word.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, Agent

AGENTS_DIR = REPO_ROOT / ".cache" / "agents"
AGENT_PACKAGES = {"claude": "@anthropic-ai/claude-code@2.1.332", "codex": "@openai/codex@0.171.0"}
AGENT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{{- '<tool_call>' + call['function']['name'] + '</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if messages[-1]['role'] == 'tool' %}{{- 'Result:' }}"
    "{%- elif not tools %}{{- 'Plainly:' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def agent_binary(name: str) -> Path:
    """Return an installed agent's executable (``scripts/install`` installs them)."""
    path = AGENTS_DIR / "node_modules" / ".bin" / name
    assert path.exists(), f"{path} is missing: run scripts/install (it installs {AGENT_PACKAGES[name]} with npm)"
    return path


def scripted_agent_model(directory: Path, tool: str, arguments: dict[str, Any], answer: str) -> Path:
    """Build a model that calls ``tool`` with ``arguments`` when it may, and answers ``answer`` after the result.

    Its context window is widened to 131072 tokens: agents send long system prompts, and the scripted
    weights read only the last token, whatever the position.
    """
    from tests.e2e.test_wrapped_support import scripted_model

    call = json.dumps({"name": tool, "arguments": arguments})
    chain = {
        "\n": "<tool_call>",
        "<tool_call>": call,
        call: "</tool_call>",
        "</tool_call>": "<|im_end|>",
        "Result:": answer,
        answer: "<|im_end|>",
        "Plainly:": answer,
    }
    model = scripted_model(
        directory,
        chain,
        "<|im_end|>",
        special=["<tool_call>", "</tool_call>"],
        plain=[call, "Result:", "Plainly:", answer],
        template=AGENT_TEMPLATE,
        tokenizer_config={"tool_parser_type": "json_tools"},
    )
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 131072
    (model / "config.json").write_text(json.dumps(config))
    return model


@dataclass
class Namespace:
    """A network namespace with only loopback up."""

    name: str

    @property
    def prefix(self) -> tuple[str, ...]:
        """Return the command prefix that runs a program inside the namespace."""
        return ("ip", "netns", "exec", self.name)

    def run(self, argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the namespace and return what it did."""
        return subprocess.run([*self.prefix, *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def loopback_namespace() -> Iterator[Namespace]:
    """Make a network namespace with only loopback (root only: skip with the reason otherwise)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("the real-agent tests need root and iproute2 to make a network namespace with only loopback")
    namespace = Namespace(f"mlxa-{os.getpid()}-{os.urandom(3).hex()}")
    subprocess.run(["ip", "netns", "add", namespace.name], check=True)
    try:
        subprocess.run([*namespace.prefix, "ip", "link", "set", "lo", "up"], check=True)
        yield namespace
    finally:
        subprocess.run(["ip", "netns", "delete", namespace.name], check=False)


def inside(agent: Agent, namespace: Namespace) -> Agent:
    """Return a CLI runner whose commands (and the servers they start) run inside ``namespace``."""
    return Agent(agent.home, agent.env, namespace.prefix)


# A stand-in API that records each request an agent sends and refuses it (the agent then gives up), so a
# test sees exactly what the real client sends, not a hand-written copy of it.
CAPTURE_SERVER = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
out = open(sys.argv[2], "a")
class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def _answer(self, status):
        body = b'{"type": "error", "error": {"type": "invalid_request_error", "message": "captured"}}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-should-retry", "false")
        self.end_headers()
        self.wfile.write(body)
    def do_HEAD(self):
        self.send_response(200)
        self.end_headers()
    def do_GET(self):
        self._answer(404)
    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        out.write(json.dumps({"path": self.path, "headers": dict(self.headers), "body": json.loads(raw)}) + "\n")
        out.flush()
        self._answer(400)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def capture(namespace: Namespace, port: int, argv: list[str], env: dict[str, str], cwd: Path) -> list[dict[str, Any]]:
    """Run an agent against the capture server on ``port`` inside ``namespace``; return the requests it sent."""
    import sys
    import time

    record = cwd / f"captured-{port}.jsonl"
    server = subprocess.Popen([*namespace.prefix, sys.executable, "-c", CAPTURE_SERVER, str(port), str(record)])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait until it listens: a connect inside the namespace succeeds
            probe = subprocess.run(
                [
                    *namespace.prefix,
                    sys.executable,
                    "-c",
                    f"import socket; socket.create_connection(('127.0.0.1', {port}), 1)",
                ],
                capture_output=True,
            )
            if probe.returncode == 0:
                break
            time.sleep(0.1)
        namespace.run(argv, env, cwd, timeout=120)
    finally:
        server.terminate()
        server.wait()
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
