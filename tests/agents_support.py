"""Real coding agents (Claude Code, Codex CLI) in a network namespace that has only loopback.

``scripts/install`` puts the pinned agents (``AGENT_PACKAGES``) in ``.cache/agents`` with npm. A test makes a
namespace (``ip netns``: it needs root, which CI has), starts the front inside it through the CLI, and runs
the agent inside it too, so neither can reach anything but this machine's loopback in that namespace.

The agents talk to a scripted tiny model (``scripted_agent_model``): offered tools with the user's question
last, it calls one given tool with given arguments; given a tool's result, it answers with a given word.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conditions import wait_until
from tests.conftest import LAUNCHER, REPO_ROOT, Agent, free_port, processes_mentioning

AGENTS_DIR = REPO_ROOT / ".cache" / "agents"
AGENT_PACKAGES = {
    "claude": "@anthropic-ai/claude-code@2.1.332",
    "codex": "@openai/codex@0.171.0",
    "opencode": "opencode-ai@1.18.33",
}
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
    from tests.e2e.wrapped_support import LEAN, scripted_model

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
        shape=LEAN,
        tokenizer_config={"tool_parser_type": "json_tools"},
    )
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 131072
    (model / "config.json").write_text(json.dumps(config))
    return model


# A scripted chain gives each link its own direction of the tiny model's width (64), one kept for the rest.
CHAIN_LIMIT = 64

# The session template writes the offered tools first, as real templates do (so a prompt that changes its tools
# changes its prefix), and numbers the turns by the tool results so far: the generation prompt ends with that
# number's marker (``Step3:``), and so does each earlier assistant turn, so the history renders as it was made
# and each turn's prompt starts with the whole previous one.
SESSION_TEMPLATE = (
    "{%- set ns = namespace(n=0) %}"
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') %}{{- 'Step' ~ ns.n ~ ':' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{{- '<tool_call>' + call['function']['name'] + '</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- if message['role'] == 'tool' %}{%- set ns.n = ns.n + 1 %}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if not tools %}{{- 'Plainly:' }}{%- else %}{{- 'Step' ~ ns.n ~ ':' }}{%- endif %}"
    "{%- endif %}"
)


def session_model(directory: Path, calls: list[tuple[str, dict[str, Any]]], answer: str, window: int = 131072) -> Path:
    """Build a model that makes ``calls`` in order, one a turn, then answers ``answer``; it answers at once untooled.

    Turn ``k`` (``k`` tool results so far) ends its prompt with the marker ``Stepk:``, which the weights map to
    one token holding ``<tool_call>`` and call ``k``'s JSON (the tool parser finds the start marker in the text),
    then ``</tool_call>``; after the last call the marker leads to the answer. ``window`` is the context window
    written in config.json (the scripted weights read only the last token, whatever the position).
    """
    steps = [f"Step{k}:" for k in range(len(calls) + 1)]
    made = ["<tool_call>" + json.dumps({"name": name, "arguments": arguments}) for name, arguments in calls]
    chain = {step: call for step, call in zip(steps, made, strict=False)}
    chain.update({call: "</tool_call>" for call in made})
    chain.update({"</tool_call>": "<|im_end|>", steps[-1]: answer, "Plainly:": answer, answer: "<|im_end|>"})
    assert len(chain) < CHAIN_LIMIT, f"{len(calls)} calls need {len(chain)} chain links"
    return windowed_model(directory, chain, [*steps, *made, "Plainly:", answer], SESSION_TEMPLATE, window)


def windowed_model(directory: Path, chain: dict[str, str], plain: list[str], template: str, window: int) -> Path:
    """Build the sessions' scripted JSON-tools model from its ``chain``, with ``window`` as its context window."""
    from tests.e2e.wrapped_support import LEAN, scripted_model

    model = scripted_model(
        directory,
        chain,
        "<|im_end|>",
        special=["<tool_call>", "</tool_call>"],
        plain=plain,
        template=template,
        shape=LEAN,
        tokenizer_config={"tool_parser_type": "json_tools"},
    )
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = window
    (model / "config.json").write_text(json.dumps(config))
    return model


def sessions_template(keys: list[str]) -> str:
    """Return ``SESSION_TEMPLATE`` with each marker led by the script's key: the first of ``keys`` a tool is named.

    The key is the name of a tool that only one script's agent offers (Claude Code's ``Read``, Codex's
    ``apply_patch`` when its catalogue knows the model, else its ``exec_command``); a request offering none of
    them takes the first script. The offered tools are the same on every turn, so each turn's prompt still starts
    with the whole previous one.
    """
    names = (
        "{%- for tool in tools or [] %}"
        "{%- set ns.names = ns.names + [(tool.get('function') or tool).get('name')] %}"
        "{%- endfor %}"
    )
    picks = "".join(
        f"{{%- if not ns.p and '{key}' in ns.names %}}{{%- set ns.p = '{key}' %}}{{%- endif %}}" for key in keys
    )
    head = (
        "{%- set ns = namespace(n=0, p='', names=[]) %}"
        + names
        + picks
        + f"{{%- if not ns.p %}}{{%- set ns.p = '{keys[0]}' %}}{{%- endif %}}"
    )
    return head + SESSION_TEMPLATE.removeprefix("{%- set ns = namespace(n=0) %}").replace("'Step' ~", "ns.p ~ 'Step' ~")


def sessions_model(
    directory: Path, scripts: dict[str, list[tuple[str, dict[str, Any]]]], answer: str, window: int = 131072
) -> Path:
    """Build ``session_model``'s model for several agents at once: the script keyed by a tool the request offers.

    ``scripts`` maps a tool name to the calls of the script for the agent that offers it (``sessions_template``
    picks it): one served model then serves each agent's session, as a shared server's model must.
    """
    chain: dict[str, str] = {}
    plain: list[str] = []
    for key, calls in scripts.items():
        steps = [f"{key}Step{k}:" for k in range(len(calls) + 1)]
        made = ["<tool_call>" + json.dumps({"name": name, "arguments": arguments}) for name, arguments in calls]
        chain.update(zip(steps, made, strict=False))
        chain.update({call: "</tool_call>" for call in made})
        chain[steps[-1]] = answer
        plain += [*steps, *(call for call in made if call not in plain)]
    chain.update({"</tool_call>": "<|im_end|>", "Plainly:": answer, answer: "<|im_end|>"})
    assert len(chain) < CHAIN_LIMIT, f"{len(scripts)} scripts need {len(chain)} chain links"
    return windowed_model(directory, chain, [*plain, "Plainly:", answer], sessions_template(list(scripts)), window)


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
        pytest.skip("needs root and iproute2 to make a network namespace with only loopback")
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


def serve(agent: Agent, model: Path, extra: list[str], key: str | None, tmp_path: Path) -> int:
    """Preview and confirm a server for ``model`` named like a hosted model; return its port."""
    port = free_port()
    args = [
        "--path",
        str(model),
        "--port",
        str(port),
        "--served-model-name",
        "local-coder",
        "--alias",
        "claude-*",
        "--alias",
        "gpt-*",
        "--max-tokens",
        "256",
        *extra,
    ]
    if key is not None:
        key_file = tmp_path / "keys"
        key_file.write_text(key + "\n")
        key_file.chmod(0o600)
        args += ["--api-key-file", str(key_file)]
    agent.launch(*args)
    return port


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """Return an agent's environment: its own home, nothing of ours, and ``extra``."""
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "TERM") if k in os.environ}
    return {**keep, "HOME": str(home), **extra}


def claude_env(home: Path, port: int, key: str | None = None, **extra: str) -> dict[str, str]:
    """Return Claude Code's environment against the front on ``port`` (its ``home`` made): no traffic but the API."""
    home.mkdir(exist_ok=True)
    return clean_env(
        home,
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
        ANTHROPIC_API_KEY=key or "unused",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        **extra,
    )


def claude_reads(note: Path) -> list[str]:
    """Return the argv of `claude -p` asked to Read ``note`` with its Read tool only (one json result)."""
    return [
        str(agent_binary("claude")),
        "--bare",
        "-p",
        f"Read {note} and tell me the word.",
        "--output-format",
        "json",
        "--model",
        "claude-sonnet-4-5",
        "--tools",
        "Read",
        "--allowedTools",
        "Read",
        "--system-prompt",
        "You read files for the user.",
    ]


def codex_exec(prompt: str) -> list[str]:
    """Return the argv of `codex exec` asked ``prompt``, running its tools without approvals or sandbox."""
    return [
        str(agent_binary("codex")),
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        prompt,
    ]


def codex_home(
    directory: Path,
    port: int,
    *,
    model: str = "gpt-5-codex",
    top: str = "",
    provider: str = "",
    name: str = "local",
    key_file: Path | None = None,
) -> Path:
    """Make a Codex home whose provider ``local`` (named ``name``) is the front on ``port``; return it.

    ``top`` adds lines to the top-level settings, ``provider`` to the provider's table (Responses API). The key
    comes from ``$LOCAL_API_KEY`` (``env_key``), or with ``key_file`` from an ``auth`` table whose command reads
    that file, as `run codex` and `wire codex` give a keyed server (Codex then also asks for its model catalogue).
    """
    from mlx_agent.plan.agent_settings import KEY_READER

    if key_file is None:
        key = 'env_key = "LOCAL_API_KEY"\n'
    else:
        args = json.dumps([*KEY_READER[1:], str(key_file)])  # a JSON array of plain strings is TOML too
        key = f"auth = {{ command = {json.dumps(KEY_READER[0])}, args = {args} }}\n"
    directory.mkdir()
    (directory / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "local"\n{top}\n[model_providers.local]\nname = "{name}"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\nwire_api = "responses"\n{key}{provider}'
    )
    return directory


def request_lines(agent: Agent, port: int) -> list[dict[str, Any]]:
    """Return every request line the front on ``port`` has written so far (``serve logs --json``)."""
    result = agent.run("serve", "logs", "--port", str(port), "--lines", "1000000")
    assert result.rc == 0, result.stdout + result.stderr
    [front] = [log for log in result.data["logs"] if log["source"] == "front"]
    found: list[dict[str, Any]] = front["requests"]
    return found


def tool_results(line: dict[str, Any]) -> int:
    """Return how many tool results a logged prompt (``--log-prompts``) holds."""
    return sum(1 for message in line.get("prompt") or [] if message.get("role") == "tool")


def wait_for_lines(
    agent: Agent, port: int, enough: Callable[[list[dict[str, Any]]], bool], timeout: float = 30
) -> list[dict[str, Any]]:
    """Return the front's request lines once ``enough`` says so (a line is written as its reply ends)."""
    deadline = time.monotonic() + timeout
    lines = request_lines(agent, port)
    while not enough(lines) and time.monotonic() < deadline:
        time.sleep(0.5)
        lines = request_lines(agent, port)
    return lines


def assert_cache_reuse(turns: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Check that from turn 2 each turn's cached tokens are >= 95% of the previous turn's prompt.

    Return each turn's (prompt_tokens, cached_tokens) pair, to report.
    """
    figures = [(t["prompt_tokens"], t["cached_tokens"]) for t in turns]
    assert all(isinstance(p, int) and isinstance(c, int) for p, c in figures), turns
    for number, ((before, _), (_, cached)) in enumerate(itertools.pairwise(figures), start=2):
        assert cached >= 0.95 * before, f"turn {number} reused {cached} of the previous {before} tokens: {figures}"
    return figures


@dataclass
class Tmux:
    """A program in its own tmux server (own socket) inside a namespace, driven by keys and read off the screen."""

    namespace: Namespace
    socket: Path
    env: dict[str, str]
    target: str = "agent"

    def tmux(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run one tmux command against this server."""
        argv = [*self.namespace.prefix, "tmux", "-S", str(self.socket), *args]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30, check=True)

    @property
    def status_file(self) -> Path:
        """Return where the program's exit status is written when it ends."""
        return self.socket.with_suffix(".status")

    def start(self, argv: list[str], cwd: Path) -> None:
        """Start ``argv`` in a 200x50 window; a shell around it writes its exit status to ``status_file``.

        tmux's own ``pane_dead_status`` is not used: tmux at times leaves the exited program unreaped.
        """
        assert shutil.which("tmux") is not None, "tmux is missing: run scripts/install (it installs it with apt-get)"
        wrapped = ["sh", "-c", 'out="$1"; shift; "$@"; echo $? > "$out"', "sh", str(self.status_file), *argv]
        self.tmux("new-session", "-d", "-s", self.target, "-x", "200", "-y", "50", "-c", str(cwd), *wrapped)
        self.tmux("set-option", "-t", self.target, "remain-on-exit", "on")  # the last screen stays to be read

    def screen(self) -> str:
        """Return what the pane shows now."""
        return self.tmux("capture-pane", "-p", "-t", self.target).stdout

    def scrollback(self) -> str:
        """Return all the pane has shown, from the first line of its history (what scrolled off the screen too)."""
        return self.tmux("capture-pane", "-p", "-S", "-", "-t", self.target).stdout

    def keys(self, *keys: str, literal: bool = False) -> None:
        """Send keys (tmux key names, or text as typed with ``literal``)."""
        self.tmux("send-keys", "-t", self.target, *(["-l"] if literal else []), *keys)

    def wait_for(self, seen: Callable[[str], bool], what: str, timeout: float = 120) -> str:
        """Wait until ``seen`` says yes to the screen; return it (fail with the screen otherwise)."""
        deadline = time.monotonic() + timeout
        screen = self.screen()
        while not seen(screen):
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {what}; the screen:\n{screen}")
            time.sleep(0.5)
            screen = self.screen()
        return screen

    def exit_status(self, timeout: float = 60) -> int:
        """Wait until the program has exited; return its exit status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            written = self.status_file.read_text() if self.status_file.exists() else ""
            if written.endswith("\n"):
                return int(written)
            time.sleep(0.5)
        raise AssertionError(f"the program did not exit; the screen:\n{self.screen()}")

    def kill(self) -> None:
        """Stop this tmux server and whatever still runs in it, and wait until the server has exited.

        kill-server answers before the server process is gone, and its command line names the test's home (``-c``):
        a check of what the test left running would otherwise catch it on its way out.
        """
        subprocess.run([*self.namespace.prefix, "tmux", "-S", str(self.socket), "kill-server"], capture_output=True)
        wait_until(lambda: not processes_mentioning(str(self.socket)), "the tmux server exited", timeout=10)


# A session of Reads that survives compaction: the progress is the highest numbered file (``/f07.txt``) named
# anywhere in the conversation (tool calls, results, a summary), so a conversation cut short at its head or
# replaced by a summary goes on where it was. A compaction request (its last user message asks for a
# ``<summary>``) is answered with a summary naming the last file read.
COMPACTING_TEMPLATE = (
    "{%- set ns = namespace(n=0, seen='', turns=0) %}"
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set ns.seen = ns.seen + message['content'] %}{%- endif %}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{%- set ns.seen = ns.seen + (call['function']['arguments'] | string) %}"
    "{%- endfor %}"
    "{%- endfor %}"
    "{%- for i in range(100) %}{%- if ('/f%02d.txt' % i) in ns.seen %}{%- set ns.n = i + 1 %}{%- endif %}{%- endfor %}"
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' and message.get('tool_calls') %}{{- 'Step' ~ ns.turns ~ ':' }}{%- endif %}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{{- '<tool_call>' + call['function']['name'] + '</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- if message['role'] == 'tool' %}{%- set ns.turns = ns.turns + 1 %}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- set last = messages[-1] %}"
    "{%- if not tools %}{{- 'Plainly:' }}"
    "{%- elif last['role'] == 'user' and last['content'] is string and '<summary>' in last['content'] %}"
    "{{- 'Summarize' ~ ns.n ~ ':' }}"
    "{%- else %}{{- 'Read' ~ ns.n ~ ':' }}{%- endif %}"
    "{%- endif %}"
)


def numbered_file(directory: Path, index: int) -> Path:
    """Return the path of the compacting session's file ``index`` (``COMPACTING_TEMPLATE`` reads its number)."""
    return directory / f"f{index:02d}.txt"


def read_call(path: Path) -> tuple[str, dict[str, Any]]:
    """Return Claude Code's Read call of ``path``."""
    return "Read", {"file_path": str(path)}


def cat_call(path: Path) -> tuple[str, dict[str, Any]]:
    """Return Codex's exec_command call that cats ``path``."""
    return "exec_command", {"cmd": f"cat {path}"}


def compacting_model(
    directory: Path,
    files: Path,
    count: int,
    answer: str,
    window: int,
    call: Callable[[Path], tuple[str, dict[str, Any]]] = read_call,
) -> Path:
    """Build a model that reads ``count`` numbered files in ``files`` by ``call`` (Claude Code's Read), then answers.

    It works out where it is from the files named so far (``COMPACTING_TEMPLATE``), and answers a compaction
    request with a summary naming the last file read. ``window`` is its context window.
    """
    from tests.e2e.wrapped_support import LEAN, scripted_model

    reads = [f"Read{k}:" for k in range(count + 1)]
    summarize = [f"Summarize{k}:" for k in range(count + 1)]
    calls = [
        "<tool_call>" + json.dumps(dict(zip(("name", "arguments"), call(numbered_file(files, k)), strict=True)))
        for k in range(count)
    ]
    summaries = ["Summary: no file read yet."]
    summaries += [f"Summary: read the files up to {numbered_file(files, k)}." for k in range(count)]
    chain = dict(zip(reads, calls, strict=False))
    chain.update({call: "</tool_call>" for call in calls})
    chain.update(dict(zip(summarize, summaries, strict=True)))
    chain.update({summary: "<|im_end|>" for summary in summaries})
    chain.update({"</tool_call>": "<|im_end|>", reads[-1]: answer, "Plainly:": answer, answer: "<|im_end|>"})
    assert len(chain) < CHAIN_LIMIT, f"{count} files need {len(chain)} chain links"
    model = scripted_model(
        directory,
        chain,
        "<|im_end|>",
        special=["<tool_call>", "</tool_call>"],
        plain=[*reads, *summarize, *calls, *summaries, "Plainly:", answer],
        template=COMPACTING_TEMPLATE,
        shape=LEAN,
        tokenizer_config={"tool_parser_type": "json_tools"},
    )
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = window
    (model / "config.json").write_text(json.dumps(config))
    return model


def notes_to_read(directory: Path, count: int = 2) -> tuple[Path, list[Path]]:
    """Make ``directory``/work holding ``count`` notes that each say basil; return it and the notes, in order."""
    work = directory / "work"
    work.mkdir()
    notes = [work / f"{chr(ord('a') + k)}.txt" for k in range(count)]
    for note in notes:
        note.write_text(f"{note.stem} says basil\n")
    return work, notes


def prompt_turns(lines: list[dict[str, Any]], marker: str) -> list[dict[str, Any]]:
    """Return the request lines whose logged prompt holds the user's ``marker`` (side requests do not), in order."""
    return [
        line
        for line in lines
        if any(m.get("role") == "user" and marker in str(m.get("content")) for m in line.get("prompt") or [])
    ]


def session_turns(cli: Agent, port: int, marker: str, count: int, seen: int = 0) -> list[dict[str, Any]]:
    """Return the session's turns (request lines whose prompt holds ``marker``), after checking every line is 200.

    ``seen``: the lines written before the session (on a shared server), which are not the session's.
    """
    lines = wait_for_lines(cli, port, lambda lines: len(prompt_turns(lines[seen:], marker)) >= count)[seen:]
    found = prompt_turns(lines, marker)
    assert [tool_results(t) for t in found] == list(range(count)), lines
    assert all(line["status"] == 200 for line in lines), [(line["endpoint"], line["status"]) for line in lines]
    billed = [line for line in lines if "x-anthropic-billing-header" in json.dumps(line.get("prompt"))]
    assert not billed, billed  # no billing block reached the template
    return found


def module_agent(directory: Path) -> Agent:
    """Return a CLI runner with its own MLX_AGENT_HOME under ``directory``, for a fixture wider than one test.

    The caller stops what it started (the ``agent`` fixture's sweep is per test).
    """
    home = directory / "home"
    home.mkdir(parents=True)
    env = {**os.environ, "MLX_AGENT_HOME": str(home), "HF_HOME": str(directory / "hf")}
    env.pop("HF_HUB_CACHE", None)
    env.pop("HUGGINGFACE_HUB_CACHE", None)
    return Agent(home, env)


def log_tail(agent: Agent, port: int, source: str, count: int = 20) -> str:
    """Return the last ``count`` lines of the server's ``source`` log (``front``, or a worker's: any other)."""
    result = agent.run("serve", "logs", "--port", str(port), "--lines", str(count))
    if result.rc != 0:
        return result.stdout + result.stderr
    logs = [log for log in result.data["logs"] if (log["source"] == "front") == (source == "front")]
    return "\n".join(line for log in logs for line in log["lines"])


def error_lines(stderr: str) -> list[str]:
    """Return the lines of an agent's stderr that report an error (the word error, in any case)."""
    return [line for line in stderr.splitlines() if re.search(r"\berror\b", line, re.IGNORECASE)]


# What Codex logs on stderr when its model catalogue cannot be read or has no entry for the model it uses.
CODEX_MODEL_TROUBLE = ("failed to refresh available models", "fallback model metadata", "failed to decode models")


def assert_no_model_trouble(stderr: str) -> None:
    """Check that Codex said nothing about its model catalogue (it read the front's, which names its model)."""
    said = [line for line in stderr.splitlines() if any(t in line for t in CODEX_MODEL_TROUBLE)]
    assert not said, "\n".join(said)


def codex_session(home: Path) -> tuple[int, str]:
    """Return the window and base instructions Codex's last session used (its rollout's meta and ``task_started``)."""
    [rollout] = sorted((home / "sessions").rglob("rollout-*.jsonl"), key=lambda p: p.stat().st_mtime)[-1:]
    records = [json.loads(line) for line in rollout.read_text().splitlines()]
    [meta] = [r["payload"] for r in records if r.get("type") == "session_meta"][:1]
    started = [r["payload"] for r in records if (r.get("payload") or {}).get("type") == "task_started"]
    assert started, f"no task_started in {rollout}"
    return int(started[0]["model_context_window"]), str(meta["base_instructions"]["text"])


CLAUDE_SETTINGS = {
    "$schema": "https://json.schemastore.org/claude-code-settings.json",
    "permissions": {"allow": ["Bash(git status)"], "deny": ["Read(./.env)"]},
    "env": {"EDITOR_HINT": "vim"},
    "includeCoAuthoredBy": False,
}

CODEX_CONFIG = """# my Codex settings
approval_policy = "on-request"  # ask before running anything

[model_providers.elsewhere]
name = "Elsewhere"
base_url = "http://127.0.0.1:9/v1"
wire_api = "responses"
env_key = "ELSEWHERE_KEY"

[tui]
notifications = true
"""


def user_home(directory: Path) -> Path:
    """Make a HOME with Claude Code's and Codex's own configs, as a user's machine has them; return it."""
    (directory / ".claude").mkdir(parents=True)
    (directory / ".claude" / "settings.json").write_text(json.dumps(CLAUDE_SETTINGS, indent=2) + "\n")
    (directory / ".codex").mkdir()
    (directory / ".codex" / "config.toml").write_text(CODEX_CONFIG)
    (directory / ".profile").write_text("export PATH=$HOME/bin:$PATH\n")
    return directory


def mlx_agent(*args: str) -> list[str]:
    """Return the command line of ``mlx-agent ARGS`` (no --json: the agent owns stdout)."""
    return [sys.executable, str(LAUNCHER), *args]


def cli_env(cli: Agent, home: Path) -> dict[str, str]:
    """Return the environment `mlx-agent run` gets: a user's (HOME, PATH), our state dir, nothing of the agent's."""
    return clean_env(home, MLX_AGENT_HOME=str(cli.home))


def trusting_config(home: Path, work: Path, key: str) -> None:
    """Write Claude Code's user config as after its first run: onboarding done, ``key`` and ``work`` trusted."""
    config = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
        "projects": {str(work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
    }
    (home / ".claude.json").write_text(json.dumps(config))


def submit(ui: Tmux, text: str, taken: Callable[[], bool]) -> None:
    """Type ``text`` into the UI's prompt box and press Enter until ``taken`` says it was.

    Keys that come in one burst read as a paste, where Enter may end up in the box instead of sending it.
    """
    ui.keys(text, literal=True)
    ui.wait_for(lambda screen: text in screen, f"{text!r} typed")
    for _ in range(10):
        ui.keys("Enter")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if taken():
                return
            time.sleep(0.5)
    raise AssertionError(f"{text!r} was never sent; the screen:\n{ui.screen()}")
