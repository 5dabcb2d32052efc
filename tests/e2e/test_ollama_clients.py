"""The Ollama API through the official clients (``ollama`` on PyPI and on npm) against a real worker.

One front for the module, over the real wrapped mlx_lm.server on the scripted agent model
(``tests.gateway_support.agent_model``): with tools offered it calls ``get_weather`` through mlx_lm's own tool
parser, after a tool result it answers ``Sunny``, and otherwise it thinks ``Considering`` then answers ``Sunny``,
so tool calls, thinking and text all come from the real runtime.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import ollama
import pytest

from tests.agents_support import AGENTS_DIR
from tests.gateway_support import AGENT_ANSWER, AGENT_THOUGHT, Gateway, agent_model, real_worker_argv, running_gateway

pytestmark = pytest.mark.e2e
NAME = "agent"
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CITY: Any = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"],
    "additionalProperties": False,
}
NODE_SCRIPT = r"""
const { Ollama } = require(process.env.OLLAMA_JS);
const client = new Ollama({ host: process.env.HOST });
(async () => {
  const out = {};
  const chat = await client.chat({ model: "agent", messages: [{ role: "user", content: "hi" }] });
  out.chat = chat.message;
  out.done_reason = chat.done_reason;
  const parts = [];
  const hi = [{ role: "user", content: "hi" }];
  for await (const part of await client.chat({ model: "agent", messages: hi, stream: true })) parts.push(part);
  out.parts = parts;
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }];
  out.tool = (await client.chat({ model: "agent", messages: [{ role: "user", content: "weather?" }], tools })).message;
  out.generate = (await client.generate({ model: "agent", prompt: "hi" })).response;
  out.list = (await client.list()).models.map((m) => [m.name, m.details.family]);
  out.show = (await client.show({ model: "agent" })).capabilities;
  out.ps = (await client.ps()).models.map((m) => m.name);
  try { await client.pull({ model: "llama3" }); } catch (e) { out.pull = [e.status_code, e.error]; }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run a front over the real runtime serving the scripted agent model as ``agent``."""
    directory = tmp_path_factory.mktemp("ollama")
    model = agent_model(directory / "model")
    argv = real_worker_argv(model, 48)
    with running_gateway(directory, argv, model_path=model, max_tokens=48, served_model_name=NAME) as started:
        yield started


@pytest.fixture
def client(gateway: Gateway) -> ollama.Client:
    """Return the official Python client pointed at the front."""
    return ollama.Client(host=gateway.base_url, timeout=120)


def test_chat_answers_with_thinking_and_content_streamed_and_not(client: ollama.Client) -> None:
    """The model's reasoning is message.thinking and its answer message.content, with real counts and durations."""
    reply = client.chat(model=NAME, messages=[{"role": "user", "content": "hi"}], stream=False)
    assert (reply.message.thinking, reply.message.content, reply.done, reply.done_reason) == (
        AGENT_THOUGHT,
        AGENT_ANSWER,
        True,
        "stop",
    )
    assert reply.prompt_eval_count and reply.eval_count and reply.eval_count >= 2
    assert reply.total_duration and reply.eval_duration is not None and reply.prompt_eval_duration
    assert reply.total_duration >= reply.prompt_eval_duration + reply.eval_duration
    parts = list(client.chat(model=NAME, messages=[{"role": "user", "content": "hi"}], stream=True, think=True))
    assert [p.done for p in parts][-1] is True and not any(p.done for p in parts[:-1])
    assert "".join(p.message.thinking or "" for p in parts) == AGENT_THOUGHT
    assert "".join(p.message.content or "" for p in parts) == AGENT_ANSWER
    assert parts[-1].eval_count == reply.eval_count


def test_generate_streams_its_response(client: ollama.Client) -> None:
    """Generate renders the prompt with the model's template and streams response pieces."""
    parts = list(client.generate(model=f"{NAME}:latest", prompt="hi", stream=True))
    assert "".join(p.response or "" for p in parts) == AGENT_ANSWER
    assert "".join(p.thinking or "" for p in parts) == AGENT_THOUGHT
    assert parts[-1].done_reason == "stop" and parts[-1].model == f"{NAME}:latest"


def test_a_raw_generate_continues_the_prompt_as_sent(client: ollama.Client) -> None:
    """raw: true skips the template: the client's own prompt is continued, reasoning tags and all."""
    prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>"
    reply = client.generate(model=NAME, prompt=prompt, raw=True, stream=False)
    assert reply.response == f"{AGENT_THOUGHT}</think>{AGENT_ANSWER}" and reply.thinking is None
    parts = list(client.generate(model=NAME, prompt=prompt, raw=True, stream=True, options={"num_predict": 1}))
    assert [p.response for p in parts] == [AGENT_THOUGHT, ""] and parts[-1].done_reason == "length"


def test_a_tool_round_trip(client: ollama.Client) -> None:
    """The model's call comes back with object arguments; the tool's result sent back gets the answer."""
    first = client.chat(model=NAME, messages=ASK, tools=[WEATHER], stream=False)
    calls = first.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    history = [*ASK, first.message, {"role": "tool", "tool_name": "get_weather", "content": "22 C"}]
    second = client.chat(model=NAME, messages=history, tools=[WEATHER], stream=False)
    assert second.message.content == AGENT_ANSWER and not second.message.tool_calls
    streamed = list(client.chat(model=NAME, messages=ASK, tools=[WEATHER], stream=True))
    assert [c.function.name for p in streamed for c in p.message.tool_calls or []] == ["get_weather"]


def test_format_with_a_schema_is_enforced(client: ollama.Client) -> None:
    """A schema in format constrains the reply: the scripted model writes prose, the reply is valid JSON."""
    reply = client.chat(
        model=NAME, messages=[{"role": "user", "content": "city"}], format=CITY, think=False, stream=False
    )
    jsonschema.validate(json.loads(reply.message.content or ""), CITY)
    generated = client.generate(model=NAME, prompt="city", format="json", stream=False, options={"num_predict": 40})
    assert isinstance(json.loads(generated.response or ""), dict)


def test_tags_show_and_version_describe_the_served_model(client: ollama.Client, gateway: Gateway) -> None:
    """The listings carry the model's real family, parameter count, dtype and window, read from its files."""
    (listed,) = client.list().models
    config = json.loads((Path(gateway.config["models"][0]["source"]["path"]) / "config.json").read_text())
    assert listed.model == NAME and listed.details is not None
    assert (listed.details.family, listed.details.format) == (config["model_type"], "safetensors")
    assert listed.details.quantization_level == "F32" and listed.details.parameter_size
    shown = client.show(NAME)
    assert shown.modelinfo is not None and shown.capabilities is not None
    assert shown.modelinfo[f"{config['model_type']}.hidden_size"] == config["hidden_size"]
    assert {"completion", "tools", "thinking"} <= set(shown.capabilities)
    assert "<|im_start|>" in (shown.template or "")
    with pytest.raises(ollama.ResponseError) as info:
        client.show("nope")
    assert info.value.status_code == 404
    version = gateway.request("GET", "/api/version").json()
    assert set(version) == {"version", "mlx_agent"}


def test_ps_then_keep_alive_zero_unloads_the_model(client: ollama.Client, gateway: Gateway) -> None:
    """Ps lists the loaded model with its measured memory; keep_alive 0 unloads it once the request ends."""
    client.generate(model=NAME, prompt="hi", stream=False)
    (loaded,) = client.ps().models
    assert loaded.model == NAME and loaded.size and loaded.size > 1_000_000 and loaded.context_length
    reply = client.generate(model=NAME, prompt="hi", stream=False, keep_alive=0)
    assert reply.response == AGENT_ANSWER
    assert gateway.wait_state("unloaded")["model_state"] == "unloaded"
    assert client.ps().models == []
    assert client.generate(model=NAME, keep_alive="10m").done_reason == "load"
    assert gateway.status()["model_state"] == "loaded"


def test_a_pull_is_refused(client: ollama.Client) -> None:
    """A pull is 501 with the reason: the server never downloads a model."""
    with pytest.raises(ollama.ResponseError) as info:
        client.pull("llama3")
    assert info.value.status_code == 501 and "never downloads" in info.value.error


def test_the_npm_client_speaks_to_the_front(gateway: Gateway, tmp_path: Path) -> None:
    """The ollama npm package: chat (single and streamed), tools, generate, list, show, ps and a refused pull."""
    package = AGENTS_DIR / "node_modules" / "ollama"
    assert package.exists(), f"{package} is missing: run scripts/install"
    script = tmp_path / "client.cjs"
    script.write_text(NODE_SCRIPT)
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "OLLAMA_JS": str(package), "HOST": gateway.base_url}
    done = subprocess.run(["node", str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out["chat"]["content"], out["chat"]["thinking"], out["done_reason"]) == (
        AGENT_ANSWER,
        AGENT_THOUGHT,
        "stop",
    )
    assert "".join(p["message"]["content"] for p in out["parts"]) == AGENT_ANSWER and out["parts"][-1]["done"]
    assert out["tool"]["tool_calls"][0]["function"] == {
        "index": 0,
        "name": "get_weather",
        "arguments": {"city": "Paris"},
    }
    assert out["generate"] == AGENT_ANSWER
    assert [name for name, _ in out["list"]] == [NAME] and "tools" in out["show"] and out["ps"] == [NAME]
    assert out["pull"][0] == 501 and "never downloads" in out["pull"][1]
