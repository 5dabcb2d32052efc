"""Helpers for the gateway tests: a stand-in worker, a config writer, and the gateway as a real subprocess."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlx_agent.gateway.anthropic.bodies import MessagesBody
from mlx_agent.gateway.anthropic.request import AnthropicRequest, translate
from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.observe.request_log import REQUEST_LINE
from mlx_agent.gateway.responses.bodies import ResponsesBody
from mlx_agent.gateway.responses.request import ResponsesRequest, to_chat
from tests.conftest import REPO_ROOT, free_port
from tests.contract_support import contract

# A stand-in for the worker: HTTP/1.0 like mlx_lm.server, echoes what it received, streams on request.
# Request fields it understands: x_chunks (stream events), x_delay (seconds between events), x_cached
# (cached_tokens to report), x_status (answer with this error status), x_sleep (seconds before a plain answer),
# x_cut (break the reply off: a body short of its length, or a stream without [DONE]).
# Env: FAKE_LOAD_DELAY (seconds before listening), FAKE_FAIL (exit 3 at once), FAKE_PREFILL (seconds before the
# head of every POST's answer: a slow prefill), FAKE_ROOM (the room left in the context: a larger max_tokens is
# cut to it and the reply's head says so, as the wrapped worker does).
FAKE_WORKER = r"""
import argparse, json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
a, _ = p.parse_known_args()
print(f"fake worker: loading pid={os.getpid()} env_offline={os.environ.get('HF_HUB_OFFLINE')}", flush=True)
if os.environ.get("FAKE_FAIL"):
    print("fake worker: cannot load", flush=True)
    sys.exit(3)
time.sleep(float(os.environ.get("FAKE_LOAD_DELAY", "0")))

class H(BaseHTTPRequestHandler):
    granted = None

    def log_message(self, *args):
        pass

    def send_response(self, status, message=None):
        super().send_response(status, message)
        if status == 200 and self.granted is not None:
            self.send_header("x-mlx-agent-granted-max-tokens", str(self.granted))

    def _json(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._json(200, {"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(float(os.environ.get("FAKE_PREFILL", "0")))
        room, self.granted = os.environ.get("FAKE_ROOM"), None
        if room and body.get("max_tokens", 0) > int(room):
            body["max_tokens"] = self.granted = int(room)
        if body.get("x_status"):
            return self._json(body["x_status"], {"error": "stand-in error"})
        prompt = json.dumps(body.get("messages", body.get("prompt")))
        usage = {"prompt_tokens": len(prompt), "completion_tokens": 1, "total_tokens": len(prompt) + 1,
                 "prompt_tokens_details": {"cached_tokens": body.get("x_cached", 0)}}
        if body.get("x_cut"):  # a reply broken off: shorter than its length, or a stream without [DONE]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if body.get("stream") else "application/json")
            if not body.get("stream"):
                self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'data: {"id": "x", "choices": []}\n\n' if body.get("stream") else b'{"id": "x", ')
            return
        if not body.get("stream"):
            time.sleep(body.get("x_sleep", 0))
            return self._json(200, {"id": "x", "object": "chat.completion", "model": body.get("model"),
                                    "choices": [{"index": 0, "finish_reason": "stop",
                                                 "message": {"role": "assistant", "content": "ok"}}],
                                    "usage": usage, "echo": body, "headers": dict(self.headers)})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b": keepalive 1/1\n\n")
        self.wfile.flush()
        for i in range(body.get("x_chunks", 3)):
            time.sleep(body.get("x_delay", 0))
            chunk = {"id": "x", "object": "chat.completion.chunk", "model": body.get("model"),
                     "choices": [{"index": 0, "finish_reason": None, "delta": {"content": f"t{i} "}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        if (body.get("stream_options") or {}).get("include_usage"):
            tail = {"id": "x", "object": "chat.completion", "model": body.get("model"), "choices": [], "usage": usage}
            self.wfile.write(f"data: {json.dumps(tail)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

print("fake worker: listening", flush=True)
ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()
"""

CONTROL_TOKEN = "control-token-for-tests-0123456789abcdef"


def private_file(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` with mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(path, 0o600)
    return path


def fake_worker_argv(directory: Path) -> list[str]:
    """Write the stand-in worker script and return its argv template (a TCP worker: ``{port}``)."""
    script = directory / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    return [sys.executable, str(script), "--host", "127.0.0.1", "--port", "{port}"]


def real_worker_argv(model: Path, max_tokens: int, **changes: Any) -> list[str]:
    """Return the argv template of the real wrapped mlx_lm.server worker (on the socket the front gives it).

    ``changes`` are fields of its contract (the plain one's otherwise).
    """
    return [
        sys.executable,
        "-m",
        "mlx_agent.runtime",
        "mlx_lm",
        "--model",
        str(model),
        "--max-tokens",
        str(max_tokens),
        "--mlx-agent-socket",
        "{socket}",
        *contract(**changes),
    ]


MODEL_KEYS = (
    "served_model_name",
    "alias",
    "hidden_names",
    "max_tokens",
    "max_tokens_ceiling",
    "context_window",
    "weight_bytes",
    "file_checks",
    "runtime_checks",
    "source",
    "draft_source",
    "prompt_cache",
)


def gateway_config(
    directory: Path, port: int, argv: list[str], *, model_path: Path, **overrides: Any
) -> dict[str, Any]:
    """Return a front config (one model) whose private files live in ``directory``.

    ``overrides`` are the model's fields (``MODEL_KEYS``), its ``policy`` as ``serve policy`` sends it
    (``idle_timeout``, ``keep_loaded``, ``min_headroom_gb``, and optionally ``preload``), or the front's own.
    """
    serve = directory / "serve"
    policy = {"idle_timeout": 0, "keep_loaded": False, "min_headroom_gb": None, **overrides.pop("policy", {})}
    transport = "unix" if any("{socket}" in a for a in argv) else "tcp"
    model: dict[str, Any] = {
        "served_model_name": "org/tiny",
        "alias": [],
        "hidden_names": ["default_model", str(model_path)],
        "max_tokens": 16,
        "max_tokens_ceiling": None,
        "context_window": None,
        "weight_bytes": 1000,
        "file_checks": [],
        "runtime_checks": [],
        "source": {"kind": "path", "path": str(model_path), "model_type": None, "files": []},
        "draft_source": None,
        "prompt_cache": None,
        "policy": {
            "idle_timeout": policy["idle_timeout"],
            "keep_loaded": policy["keep_loaded"],
            "preload": policy.get("preload", False),
        },
        "worker": {
            "transport": transport,
            "cuts_to_context": transport == "unix",
            "secret_env": None,
            "model_name": "default_model",
            "argv": argv,
            "env": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
            "cwd": "/",
            "readiness": {"path": "/health", "status": 200, "json": {"status": "ok"}},
            "ready_timeout": 60,
            "stop_timeout": 5,
            "log_path": str(serve / f"{port}.worker.log"),
        },
    }
    for key in MODEL_KEYS:
        if key in overrides:
            model[key] = overrides.pop(key)
    config: dict[str, Any] = {
        "format_version": "2.0",
        "host": "127.0.0.1",
        "port": port,
        "mode": "jit",
        "models": [model],
        "min_headroom_gb": policy["min_headroom_gb"],
        "policy_path": str(serve / f"{port}.policy.json"),
        "control_token_path": str(serve / f"{port}.token"),
        "api_key_path": None,
        "max_body_bytes": 1024 * 1024,
        "max_connections": 512,
        "header_timeout": 30.0,
        "keepalive_timeout": 60.0,
        "body_timeout": 60.0,
        "body_min_rate": 1024.0,
        "body_grace": 5.0,
        "socket_dir": "",
        "max_loaded": None,
        "log_prompts": False,
    }
    config.update(overrides)
    return config


@dataclass
class Reply:
    """One HTTP exchange with the gateway."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """Return the body parsed as JSON."""
        return json.loads(self.body)


@dataclass
class Gateway:
    """A gateway subprocess started from a config, with helpers to talk to it."""

    config: dict[str, Any]
    config_path: Path
    proc: subprocess.Popen[bytes]
    log_path: Path
    worker_pids: set[int] = field(default_factory=set)

    @property
    def port(self) -> int:
        """Return the gateway's port."""
        port: int = self.config["port"]
        return port

    @property
    def base_url(self) -> str:
        """Return the gateway's base URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def worker_log(self) -> Path:
        """Return the (first model's) worker log path."""
        return Path(self.config["models"][0]["worker"]["log_path"])

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 120,
        raw: bytes | None = None,
    ) -> Reply:
        """Send one request with http.client (the Host header is set by ``headers`` when given)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def control(self, method: str, path: str, body: Any = None, token: str | None = CONTROL_TOKEN) -> Reply:
        """Call a control endpoint with the control token."""
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return self.request(method, "/mlx-agent/" + path, body, headers)

    def state(self) -> dict[str, Any]:
        """Return the front's state document, remembering any worker pid seen."""
        reply = self.control("GET", "status")
        assert reply.status == 200, reply.body
        front: dict[str, Any] = reply.json()
        for model in front["models"]:
            if model["worker"]:
                self.worker_pids.add(model["worker"]["pid"])
        return front

    def status(self) -> dict[str, Any]:
        """Return the first model's state with the front's own fields (what a one-model front reports)."""
        front = self.state()
        return {**front, **front["models"][0]}

    def wait_state(self, model_state: str, timeout: float = 60) -> dict[str, Any]:
        """Poll status until ``model_state`` is reached (a wait, not a timing assertion)."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.status()
            if state["model_state"] == model_state or time.monotonic() > deadline:
                return state
            time.sleep(0.1)

    def chat(self, content: str = "hi", **fields: Any) -> Reply:
        """Send a chat completion."""
        return self.request(
            "POST",
            "/v1/chat/completions",
            {"model": "org/tiny", "messages": [{"role": "user", "content": content}], **fields},
        )

    def worker_loads(self) -> int:
        """Return how many worker loads the worker log records."""
        text = self.worker_log.read_text() if self.worker_log.exists() else ""
        return text.count("mlx-agent front: worker load ")

    def stop(self) -> None:
        """TERM the gateway (which stops its worker), then KILL anything of ours that is left."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for pid in self.worker_pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def start_gateway(
    directory: Path,
    config: dict[str, Any],
    *,
    token: str = CONTROL_TOKEN,
    api_keys: list[str] | None = None,
    wait: bool = True,
) -> Gateway:
    """Write the token (and key) files and the config, start the gateway and wait for /health."""
    private_file(Path(config["control_token_path"]), token + "\n")
    if api_keys is not None:
        key_path = private_file(directory / "api_keys", "\n".join(api_keys) + "\n")
        config["api_key_path"] = str(key_path)
    config_path = private_file(directory / f"gateway-{config['port']}.json", json.dumps(config))
    log_path = directory / f"gateway-{config['port']}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlx_agent.gateway", "--config", str(config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            start_new_session=True,
        )
    gateway = Gateway(config, config_path, proc, log_path)
    if wait:
        try:
            wait_healthy(gateway)
        except BaseException:
            gateway.stop()
            raise
    return gateway


def wait_healthy(gateway: Gateway) -> None:
    """Wait until the gateway answers /health; fail with its log if it exits or stays silent."""
    deadline = time.monotonic() + 30
    while True:
        assert gateway.proc.poll() is None, gateway.log_path.read_text()
        with contextlib.suppress(OSError):
            if gateway.request("GET", "/health", timeout=2).status == 200:
                return
        assert time.monotonic() < deadline, gateway.log_path.read_text()
        time.sleep(0.05)


@contextlib.contextmanager
def running_gateway(
    directory: Path,
    argv: list[str] | None = None,
    *,
    model_path: Path | None = None,
    api_keys: list[str] | None = None,
    env: dict[str, str] | None = None,
    **overrides: Any,
) -> Iterator[Gateway]:
    """Start a gateway over the stand-in worker (or ``argv``), and stop it and its worker afterwards."""
    config = gateway_config(
        directory,
        free_port(),
        argv or fake_worker_argv(directory),
        model_path=model_path or directory / "model",
        **overrides,
    )
    if env:
        config["models"][0]["worker"]["env"].update(env)
    with serving(directory, config, api_keys=api_keys) as gateway:
        yield gateway


@contextlib.contextmanager
def serving(directory: Path, config: dict[str, Any], api_keys: list[str] | None = None) -> Iterator[Gateway]:
    """Start a gateway from ``config``, and stop it and its workers afterwards."""
    gateway = start_gateway(directory, config, api_keys=api_keys)
    try:
        yield gateway
    finally:
        gateway.stop()


def pid_alive(pid: int) -> bool:
    """Say whether ``pid`` names a live, non-zombie process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- the Anthropic Messages and OpenAI Responses tests ----------------------------------------------------

# A scripted agent model (tests/e2e/wrapped_support.scripted_model: a real model whose greedy next token
# depends only on the current one). Its ChatML template ends the generation prompt according to the
# conversation, and each ending starts a fixed chain of tokens:
#   tools offered, last message from the user  ->  "\n"       -> <tool_call>CALL</tool_call><|im_end|>
#   last message a tool result                 ->  "Result:"  -> Sunny<|im_end|>
#   no tools offered                           ->  "<think>"  -> Considering</think>Sunny<|im_end|>
# The tokenizer names mlx_lm's json_tools parser, so the worker returns CALL as a real OpenAI tool call.
AGENT_CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
AGENT_ANSWER = "Sunny"
AGENT_THOUGHT = "Considering"
AGENT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{{- '<tool_call>' + call['function']['name'] + ' ' + (call['function']['arguments'] | tojson) + '</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if messages[-1]['role'] == 'tool' %}{{- 'Result:' }}"
    "{%- elif not tools %}{{- '<think>' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def agent_model(directory: Path) -> Path:
    """Build the scripted agent model described above (needs mlx: e2e tests only)."""
    from tests.e2e.wrapped_support import scripted_model

    chain = {
        "\n": "<tool_call>",
        "<tool_call>": AGENT_CALL,
        AGENT_CALL: "</tool_call>",
        "</tool_call>": "<|im_end|>",
        "Result:": AGENT_ANSWER,
        "<think>": AGENT_THOUGHT,
        AGENT_THOUGHT: "</think>",
        "</think>": AGENT_ANSWER,
    }
    special = ["<tool_call>", "</tool_call>", "<think>", "</think>"]
    return scripted_model(
        directory,
        chain,
        "<|im_end|>",
        special=special,
        plain=[AGENT_CALL, "Result:", AGENT_ANSWER, AGENT_THOUGHT],
        template=AGENT_TEMPLATE,
        tokenizer_config={"tool_parser_type": "json_tools"},
    )


# A stand-in worker speaking chat completions the way OpenAI-style servers do, for what the real runtime never
# does: tool-call arguments streamed in fragments, a stream that breaks off, a stream held open. It answers by
# the last message: tools offered -> a get_weather call (streamed: id and name, then the arguments in two
# pieces); "break" -> one delta, then it hangs up without [DONE]; "hold" -> one delta, then it waits until the
# file $STAND_IN_RELEASE exists; anything else -> "Hello from the stand-in" in three deltas. Every request body
# it receives is appended to $STAND_IN_LOG (JSON lines).
CHAT_STAND_IN = r"""
import argparse, json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
p = argparse.ArgumentParser()
p.add_argument("--port", type=int, required=True)
a, _ = p.parse_known_args()

class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send(self, doc):
        self.wfile.write(f"data: {json.dumps(doc)}\n\n".encode())
        self.wfile.flush()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open(os.environ["STAND_IN_LOG"], "a") as log:
            log.write(json.dumps(body) + "\n")
        last = body["messages"][-1].get("content") or ""
        usage = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14,
                 "prompt_tokens_details": {"cached_tokens": 4}}
        base = {"id": "chatcmpl-stand-in", "object": "chat.completion.chunk", "model": body.get("model")}
        call = {"id": "call_stand_in_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        if not body.get("stream"):
            message = {"role": "assistant", "content": None if body.get("tools") else "Hello from the stand-in"}
            if body.get("tools"):
                message["tool_calls"] = [call]
            doc = {**base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if body.get("tools") else "stop"}]}
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
        self.wfile.write(b": keepalive 1/1\n\n")
        if body.get("tools"):
            deltas = [{"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                       "function": {"name": "get_weather", "arguments": ""}}]},
                      {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
                      {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}]
            finish = "tool_calls"
        else:
            deltas = [{"role": "assistant", "content": "Hello"}, {"content": " from"}, {"content": " the stand-in"}]
            finish = "stop"
        for i, delta in enumerate(deltas):
            self.send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
            if i == 0 and last == "break":
                return
            if i == 0 and last == "hold":
                while not os.path.exists(os.environ["STAND_IN_RELEASE"]):
                    time.sleep(0.02)
        self.send({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self.send({**base, "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

ThreadingHTTPServer(("127.0.0.1", a.port), H).serve_forever()
"""


def chat_stand_in_argv(directory: Path) -> list[str]:
    """Write the chat stand-in script and return its argv template."""
    script = directory / "chat_stand_in.py"
    script.write_text(CHAT_STAND_IN)
    return [sys.executable, str(script), "--host", "127.0.0.1", "--port", "{port}"]


def stand_in_gateway(directory: Path, **options: Any) -> contextlib.AbstractContextManager[Gateway]:
    """Return what runs a gateway over the chat stand-in worker (its bodies log and release file in ``directory``)."""
    env = {"STAND_IN_LOG": str(directory / "bodies.jsonl"), "STAND_IN_RELEASE": str(directory / "release")}
    return running_gateway(directory, chat_stand_in_argv(directory), env=env, **options)


def sent_bodies(gateway: Gateway) -> list[dict[str, Any]]:
    """Return the request bodies the chat stand-in worker received, oldest first."""
    path = Path(gateway.config["models"][0]["worker"]["env"]["STAND_IN_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def read_sse(body: bytes) -> list[tuple[str | None, Any]]:
    """Split a server-sent event stream into (event name, parsed data) pairs; comments are left out."""
    events: list[tuple[str | None, Any]] = []
    for block in body.decode().split("\n\n"):
        name = None
        data = []
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        if data:
            text = "\n".join(data)
            events.append((name, text if text == "[DONE]" else json.loads(text)))
    return events


@contextlib.contextmanager
def squatting(port: int, body: bytes) -> Iterator[list[str]]:
    """Answer every GET and POST on loopback ``port`` with the JSON ``body``, as a program that took the port would.

    Yields the paths it was asked for, in order.
    """
    import http.server
    import threading

    seen: list[str] = []

    class Squatter(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Squatter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


def translate_messages(body: dict[str, Any]) -> AnthropicRequest:
    """Translate a Messages body as the front does: parsed by its declaration, then translated."""
    return translate(parse(MessagesBody, body))


def translate_responses(body: dict[str, Any], *, default_model: str) -> ResponsesRequest:
    """Translate a Responses body as the front does: parsed by its declaration, then translated."""
    return to_chat(parse(ResponsesBody, body), default_model=default_model)


def request_lines(gateway: Gateway) -> list[dict[str, Any]]:
    """Return the front's request lines so far."""
    lines = gateway.log_path.read_text().splitlines()
    return [json.loads(line.split(REQUEST_LINE, 1)[1]) for line in lines if REQUEST_LINE + "{" in line]
