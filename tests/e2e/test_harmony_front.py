"""gpt-oss's Harmony replies through the front: chat completions, Messages (``anthropic``) and Responses (``openai``).

Each form gpt-oss writes (``tests.e2e.harmony_support.FORMS``: analysis then final; a preamble, then a call with
the recipient in the channel header; a call with the recipient in the role header after a tool round; a call
from the analysis channel; arguments that are not JSON) is served by the real wrapped worker behind the real
front, and every API gets the same split, streamed or not: the analysis as reasoning (a ``thinking`` block, a
``reasoning`` item), the final channel and a preamble as text, each call as a tool call.

Against bare mlx_lm.server (0.32.2) every one of these fails: the worker answers one ``content`` holding the
whole reply, channel markup included, with no reasoning and no tool calls, so the front would return one text
block or message and no ``tool_use`` or ``function_call``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.harmony_support import FORMS, Form, harmony_model
from tests.gateway_support import Gateway, real_worker_argv, running_gateway

pytestmark = pytest.mark.e2e
MAX_TOKENS = 32


@dataclass(frozen=True)
class Split:
    """A reply as an API returned it, in one shape for every API: reasoning, text, calls, how it ended."""

    reasoning: str
    content: str
    calls: tuple[tuple[str, Any], ...]
    ended: str


def wanted(form: Form, ended: str) -> Split:
    """Return the split a form's reply must come back as (``ended`` in the API's own words)."""
    return Split(form.reasoning, form.content, form.calls, ended)


@pytest.fixture(scope="module", params=sorted(FORMS))
def front(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Form, Gateway]]:
    """Run the front over the real worker serving the model that writes one form."""
    directory = tmp_path_factory.mktemp(request.param)
    form = FORMS[request.param]
    model = harmony_model(directory / "model", form.chain)
    with running_gateway(
        directory, real_worker_argv(model, MAX_TOKENS), model_path=model, max_tokens=MAX_TOKENS
    ) as gateway:
        yield form, gateway


# -- chat completions -------------------------------------------------------------------------------------------


def test_chat_completions_split_the_reply(front: tuple[Form, Gateway]) -> None:
    """Reasoning, content and tool calls come back as mlx_lm returns separated ones, the same streamed."""
    form, gateway = front
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="local", timeout=120, max_retries=0)
    create: Any = client.chat.completions.create
    params: dict[str, Any] = {"model": "org/tiny", "messages": form.messages, "max_tokens": MAX_TOKENS}
    if form.tools:
        params["tools"] = form.tools
    reply = create(**params)
    message = reply.choices[0].message
    calls = tuple((c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or [])
    plain = Split(
        (message.model_extra or {}).get("reasoning", ""), message.content or "", calls, reply.choices[0].finish_reason
    )
    assert plain == wanted(form, form.finish_reason)
    reasoning = content = ""
    streamed_calls: list[tuple[str, Any]] = []
    finish = ""
    for chunk in create(**params, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        reasoning += (delta.model_extra or {}).get("reasoning", "")
        content += delta.content or ""
        streamed_calls += [(c.function.name, json.loads(c.function.arguments)) for c in delta.tool_calls or []]
        finish = chunk.choices[0].finish_reason or finish
    assert Split(reasoning, content, tuple(streamed_calls), finish) == plain


# -- Anthropic Messages -----------------------------------------------------------------------------------------


def anthropic_messages(messages: Any) -> list[dict[str, Any]]:
    """Return a chat conversation as Anthropic messages (a tool round as tool_use and tool_result blocks)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "user":
            out.append({"role": "user", "content": message["content"]})
        elif message["role"] == "assistant":
            uses = [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "input": json.loads(c["function"]["arguments"]),
                }
                for c in message["tool_calls"]
            ]
            out.append({"role": "assistant", "content": uses})
        else:
            result = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": message["content"]}
            out.append({"role": "user", "content": [result]})
    return out


def anthropic_tools(tools: Any) -> list[dict[str, Any]]:
    """Return chat tools as Anthropic tools."""
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in tools or []
    ]


def split_message(message: Any) -> Split:
    """Return an Anthropic Message as a split."""
    reasoning = "".join(b.thinking for b in message.content if b.type == "thinking")
    content = "".join(b.text for b in message.content if b.type == "text")
    calls = tuple((b.name, b.input) for b in message.content if b.type == "tool_use")
    return Split(reasoning, content, calls, message.stop_reason)


def test_messages_give_thinking_text_and_tool_use_blocks(front: tuple[Form, Gateway]) -> None:
    """The analysis is a thinking block, the text a text block, each call a tool_use block; streamed the same."""
    form, gateway = front
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key="local", timeout=120, max_retries=0)
    params: dict[str, Any] = {
        "model": "org/tiny",
        "max_tokens": MAX_TOKENS,
        "messages": anthropic_messages(form.messages),
    }
    if form.tools:
        params["tools"] = anthropic_tools(form.tools)
    plain = split_message(client.messages.create(**params))
    assert plain == wanted(form, "tool_use" if form.calls else "end_turn")
    with client.messages.stream(**params) as stream:
        assert split_message(stream.get_final_message()) == plain


# -- OpenAI Responses -------------------------------------------------------------------------------------------


def response_input(messages: Any) -> list[dict[str, Any]]:
    """Return a chat conversation as Responses input items (a tool round as function_call and its output)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "user":
            items.append({"role": "user", "content": message["content"]})
        elif message["role"] == "assistant":
            items += [
                {
                    "type": "function_call",
                    "call_id": c["id"],
                    "name": c["function"]["name"],
                    "arguments": c["function"]["arguments"],
                }
                for c in message["tool_calls"]
            ]
        else:
            items.append(
                {"type": "function_call_output", "call_id": message["tool_call_id"], "output": message["content"]}
            )
    return items


def response_tools(tools: Any) -> list[dict[str, Any]]:
    """Return chat tools as Responses function tools."""
    return [{"type": "function", "strict": False, **t["function"]} for t in tools or []]


def split_response(response: Any) -> Split:
    """Return a Responses response as a split."""
    reasoning = "".join(
        part.text for item in response.output if item.type == "reasoning" for part in item.content or []
    )
    calls = tuple((item.name, json.loads(item.arguments)) for item in response.output if item.type == "function_call")
    return Split(reasoning, response.output_text, calls, response.status)


def test_responses_give_reasoning_message_and_function_call_items(front: tuple[Form, Gateway]) -> None:
    """The analysis is a reasoning item, the text a message, each call a function_call item; streamed the same."""
    form, gateway = front
    client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="local", timeout=120, max_retries=0)
    params: dict[str, Any] = {
        "model": "org/tiny",
        "input": response_input(form.messages),
        "max_output_tokens": MAX_TOKENS,
    }
    if form.tools:
        params["tools"] = response_tools(form.tools)
    create: Any = client.responses.create
    plain = split_response(create(**params))
    assert plain == wanted(form, "completed")
    final = [event.response for event in create(**params, stream=True) if event.type == "response.completed"]
    assert [split_response(response) for response in final] == [plain]
