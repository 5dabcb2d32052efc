"""Tool calls survive the values real models write: a Qwen3-Coder call with values its parser raises on.

The model is scripted (``wrapped_support.scripted_model``) to answer with one Qwen3-Coder call whose values
are the ones that broke agents: a word for an untyped parameter, an object with text after its closing brace,
``1e400`` for a number, and ``3.5`` for a ``number | null`` union (zod's ``anyOf``). The call arrives with the
documented values (docs/wrapped-server.md, "Lenient tool-call values") through the worker, streamed or not,
through every API of the front, and through prompt lookup.

Against bare mlx_lm.server (0.32.2) each test fails: its Qwen3-Coder parser raises ``OverflowError`` on
``1e400``, which its tool-call formatter does not catch, so the request fails with no reply at all (and were
the number fine, the union's ``3.5`` would arrive as the string ``"3.5"``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.contract_support import LOOKUP
from tests.e2e.wrapped_support import Server, running, scripted_model
from tests.gateway_support import Gateway, real_worker_argv, running_gateway

pytestmark = pytest.mark.e2e

CALL = (
    "\n<function=configure>\n<parameter=note>\nsoon\n</parameter>\n"
    '<parameter=options>\n{"depth": 2} and more\n</parameter>\n'
    "<parameter=size>\n1e400\n</parameter>\n<parameter=limit>\n3.5\n</parameter>\n</function>\n"
)
PARAMETERS: Any = {
    "type": "object",
    "properties": {
        "note": {"description": "untyped"},
        "options": {"type": "object"},
        "size": {"type": "number"},
        "limit": {"anyOf": [{"type": "number"}, {"type": "null"}]},
    },
}
# The documented values: text for what does not read as its type, the union's first member that fits.
ARGUMENTS = {"note": "soon", "options": '{"depth": 2} and more', "size": "1e400", "limit": 3.5}
TOOLS: Any = [
    {"type": "function", "function": {"name": "configure", "description": "Set up.", "parameters": PARAMETERS}}
]
ASK: Any = [{"role": "user", "content": "Configure it."}]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the model that answers every prompt with the Qwen3-Coder call above."""
    chain = {"\n": "<tool_call>", "<tool_call>": CALL, CALL: "</tool_call>", "</tool_call>": "<|im_end|>"}
    return scripted_model(
        tmp_path_factory.mktemp("qwen") / "model",
        chain,
        "<|im_end|>",
        special=["<tool_call>", "</tool_call>"],
        plain=[CALL],
        tokenizer_config={"tool_parser_type": "qwen3_coder"},
    )


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[Server]:
    """Serve the model from the wrapped worker."""
    with running(model, model.parent) as started:
        yield started


@pytest.fixture(scope="module")
def front(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Serve the model from the real worker behind the front."""
    with running_gateway(tmp_path_factory.mktemp("front"), real_worker_argv(model, 32), model_path=model) as gateway:
        yield gateway


def test_the_call_arrives_with_the_documented_values(server: Server) -> None:
    """Each bad value is read by the documented rule, and the call is a tool call, streamed or not."""
    status, answer = server.post({"messages": ASK, "tools": TOOLS, "max_tokens": 16})
    assert status == 200, answer
    choice = answer["choices"][0]
    [call] = choice["message"]["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("configure", ARGUMENTS)
    assert choice["finish_reason"] == "tool_calls" and "unparsed_tool_calls" not in choice["message"]
    status, stream = server.post({"messages": ASK, "tools": TOOLS, "max_tokens": 16, "stream": True})
    chunks = [json.loads(line[len("data: ") :]) for line in stream.splitlines() if line.startswith("data: {")]
    calls = [c for chunk in chunks for c in chunk["choices"][0]["delta"].get("tool_calls", [])]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [ARGUMENTS]


def test_the_call_flows_through_every_api_of_the_front(front: Gateway) -> None:
    """Chat completions, Messages and Responses all return the one call with the documented values."""
    chat = openai.OpenAI(base_url=front.base_url + "/v1", api_key="local", max_retries=0).chat.completions.create(
        model="org/tiny", messages=ASK, tools=TOOLS, max_tokens=16
    )
    [call] = chat.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == ARGUMENTS  # type: ignore[union-attr]
    tool: Any = {"name": "configure", "description": "Set up.", "input_schema": PARAMETERS}
    client = anthropic.Anthropic(base_url=front.base_url, api_key="local", max_retries=0)
    message = client.messages.create(model="org/tiny", max_tokens=16, messages=ASK, tools=[tool])
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == [("configure", ARGUMENTS)]
    assert message.stop_reason == "tool_use"
    responses: Any = openai.OpenAI(base_url=front.base_url + "/v1", api_key="local", max_retries=0).responses
    function = {"type": "function", "name": "configure", "parameters": PARAMETERS, "strict": False}
    response = responses.create(model="org/tiny", input="Configure it.", tools=[function], max_output_tokens=16)
    calls = [(i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"]
    assert calls == [("configure", ARGUMENTS)]


def test_prompt_lookup_returns_the_same_call(model: Path) -> None:
    """A plain greedy request served by prompt lookup parses its call the same way."""
    with running(model, model.parent, *LOOKUP) as fast:
        status, answer = fast.post({"messages": ASK, "tools": TOOLS, "max_tokens": 16, "temperature": 0})
        assert status == 200, answer
        [call] = answer["choices"][0]["message"]["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == ARGUMENTS
        log = fast.wait_for_log(" prompt lookup: ")
    assert re.search(rf"{re.escape(answer['id'])} prompt lookup: ", log)
