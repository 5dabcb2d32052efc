"""The Anthropic Messages API of the JIT gateway, driven by the official ``anthropic`` SDK.

Three workers stand behind the gateway, each for what it shows:

* the real wrapped mlx_lm.server on the tiny random-weight model: plain and streamed text, count_tokens, the
  refusals;
* the real wrapped server on a scripted model (``tests.gateway_support.agent_model``): a random-weight model
  never chooses a tool, so this one is built to: its greedy next token depends only on the current token, and
  its chat template ends the generation prompt so that the chain it starts writes ``<tool_call>{...}
  </tool_call>`` when tools are offered, ``Sunny`` after a tool result, and ``<think>Considering</think>Sunny``
  without tools. mlx_lm's own json_tools parser turns the call into an OpenAI tool call, so the tool round trip
  runs through the real runtime, streamed and not;
* a stand-in worker (``tests.gateway_support.CHAT_STAND_IN``) for what the runtime never does: tool arguments
  streamed in fragments, a stream that breaks off, a stream held open while unload is tried.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.gateway_support import (
    AGENT_ANSWER,
    AGENT_THOUGHT,
    Gateway,
    read_sse,
    real_worker_argv,
    running_gateway,
    sent_bodies,
    stand_in_gateway,
)

pytestmark = pytest.mark.e2e
MAX_TOKENS = 8
WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]


def client_for(gateway: Gateway, key: str = "local") -> anthropic.Anthropic:
    """Return the official client pointed at the gateway (no retries: a test sees the first answer)."""
    return anthropic.Anthropic(base_url=gateway.base_url, api_key=key, timeout=120, max_retries=0)


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[Gateway]:
    """Run a gateway over the chat stand-in worker, for a test that unloads it (the readers share stand_in_front)."""
    with stand_in_gateway(tmp_path) as gateway:
        yield gateway


# -- the real model -------------------------------------------------------------------------------------------


def test_turn_two_reads_turn_one_from_the_cache_despite_the_billing_block(keyed_tiny_front: Gateway) -> None:
    """Claude Code's per-turn billing block is left out, so turn 2 reuses turn 1's prompt from the worker's cache."""
    # A key of its own on the shared keyed front: what earlier tests left in the worker's cache (a template's
    # opening tokens) is never reported to it, so turn 1 reads nothing whichever test ran before.
    client = client_for(keyed_tiny_front, "frank-key")
    instructions = {
        "type": "text",
        "text": "You are a careful coding agent. " * 12,
        "cache_control": {"type": "ephemeral"},
    }

    def system(nonce: str) -> Any:
        return [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.332; cch={nonce};"}, instructions]

    history: Any = [{"role": "user", "content": "Look at the repository and tell me what it does."}]
    first = client.messages.create(model="org/tiny", max_tokens=8, system=system("a1"), messages=history)
    assert not first.usage.cache_read_input_tokens
    history += [
        {"role": "assistant", "content": first.content[0].text if first.content else ""},  # type: ignore[union-attr]
        {"role": "user", "content": "And the tests?"},
    ]
    second = client.messages.create(model="org/tiny", max_tokens=8, system=system("b2"), messages=history)
    assert (second.usage.cache_read_input_tokens or 0) > first.usage.input_tokens // 2


def test_plain_message_from_the_real_model(tiny_front: Gateway) -> None:
    """A message comes back as Anthropic's Message: the client's model name, text, max_tokens, usage."""
    message = client_for(tiny_front).messages.create(model="org/tiny", max_tokens=1000, messages=ASK)
    assert message.type == "message" and message.role == "assistant" and message.model == "org/tiny"
    assert message.id.startswith("msg_")
    [block] = message.content
    assert block.type == "text" and block.text
    assert message.stop_reason == "max_tokens"  # the random model never ends; the plan's ceiling of 8 does
    assert message.usage.output_tokens == MAX_TOKENS
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 0


def test_streamed_message_follows_anthropics_event_sequence(tiny_front: Gateway) -> None:
    """The stream is message_start, ping, one text block's start/deltas/stop, message_delta, message_stop."""
    raw = tiny_front.request(
        "POST", "/v1/messages", {"model": "org/tiny", "max_tokens": MAX_TOKENS, "messages": ASK, "stream": True}
    )
    assert raw.status == 200 and raw.headers["content-type"].startswith("text/event-stream")
    events = read_sse(raw.body)
    assert all(name == data["type"] for name, data in events)
    assert [name for name, _ in events][:2] == ["message_start", "ping"]  # the SDK hides pings; the wire has them
    kinds = [name for name, _ in events if name != "ping"]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert set(kinds[2:-3]) == {"content_block_delta"}
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    client = client_for(tiny_front)
    with client.messages.stream(model="org/tiny", max_tokens=MAX_TOKENS, messages=ASK) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    plain = client.messages.create(model="org/tiny", max_tokens=MAX_TOKENS, messages=ASK)
    assert plain.content[0].type == "text"
    assert streamed == plain.content[0].text  # greedy: the same answer either way
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == MAX_TOKENS
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == (
        plain.usage.input_tokens + (plain.usage.cache_read_input_tokens or 0)
    )


def test_count_tokens_counts_with_the_models_template(tiny_front: Gateway) -> None:
    """count_tokens equals the prompt a real request reports; system and tools make it longer."""
    client = client_for(tiny_front)
    counted = client.messages.count_tokens(model="org/tiny", messages=ASK).input_tokens
    message = client.messages.create(model="org/tiny", max_tokens=1, messages=ASK)
    assert counted == message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0)
    with_system = client.messages.count_tokens(model="org/tiny", messages=ASK, system="You are terse.")
    assert with_system.input_tokens > counted
    assert client.messages.count_tokens(model="org/tiny", messages=ASK, tools=[WEATHER]).input_tokens >= counted


IMAGE: Any = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
DOCUMENT: Any = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}}
REFUSALS: Any = {
    "image": {"messages": [{"role": "user", "content": [IMAGE, {"type": "text", "text": "What is this?"}]}]},
    "document": {"messages": [{"role": "user", "content": [DOCUMENT]}]},
    "computer_tool": {
        "tools": [{"type": "computer_20250124", "name": "computer", "display_width_px": 800, "display_height_px": 600}]
    },
    "tool_choice_any": {"tools": [WEATHER], "tool_choice": {"type": "any"}},
    "tool_choice_tool": {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}},
    "code_container": {"extra_body": {"container": "container_1"}},
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_the_runtime_cannot_honour_is_refused_in_anthropics_shape(tiny_front: Gateway, case: str) -> None:
    """Each refusal is a 400 invalid_request_error the SDK raises as BadRequestError."""
    request = {"model": "org/tiny", "max_tokens": 8, "messages": ASK, **REFUSALS[case]}
    with pytest.raises(anthropic.BadRequestError) as info:
        client_for(tiny_front).messages.create(**request)
    body: Any = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"]


def test_an_unknown_model_is_not_found_in_anthropics_shape(tiny_front: Gateway) -> None:
    """A model the front does not serve is a 404 not_found_error naming the served models; the SDK does not retry."""
    with pytest.raises(anthropic.NotFoundError) as info:
        client_for(tiny_front).messages.create(model="someone/else", max_tokens=8, messages=ASK)
    body: Any = info.value.body
    assert body["error"]["type"] == "not_found_error" and "org/tiny" in body["error"]["message"]
    assert info.value.response.headers["x-should-retry"] == "false"


def test_front_door_errors_take_anthropics_shape_too(tiny_front: Gateway) -> None:
    """Invalid JSON and an oversized body on /v1/messages answer in Anthropic's error shape."""
    reply = tiny_front.request("POST", "/v1/messages", raw=b"{not json")
    assert reply.status == 400 and reply.json()["error"]["type"] == "invalid_request_error"
    big = tiny_front.request("POST", "/v1/messages", raw=b"x" * (tiny_front.config["max_body_bytes"] + 1))
    assert big.status == 413 and big.json() == {
        "type": "error",
        "error": {"type": "request_too_large", "message": big.json()["error"]["message"], "code": "body_too_large"},
    }


def test_the_workers_own_refusals_pass_through_in_anthropics_shape(tiny_front: Gateway) -> None:
    """A parameter the worker refuses (a negative temperature) is a 400 invalid_request_error naming it."""
    with pytest.raises(anthropic.BadRequestError) as info:
        client_for(tiny_front).messages.create(
            model="org/tiny", max_tokens=8, messages=ASK, extra_body={"temperature": -1}
        )  # no SDK argument
    body: Any = info.value.body
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["param"] == "temperature"


def test_cache_reads_are_reported_only_to_the_key_that_sent_the_prompt(keyed_tiny_front: Gateway) -> None:
    """With API keys, cache_read_input_tokens counts only prompts the same key sent before."""

    def cached(key: str) -> int:
        message = client_for(keyed_tiny_front, key).messages.create(
            model="org/tiny",
            max_tokens=2,
            messages=[{"role": "user", "content": "a long private prompt about the quarterly plan"}],
        )
        return message.usage.cache_read_input_tokens or 0

    assert cached("alice-key") == 0
    assert cached("alice-key") > 0  # her own prompt, cached by the worker
    assert cached("bob-key") == 0  # the worker has it cached too, but bob never sent it


# -- the scripted agent model -----------------------------------------------------------------------------


def test_tool_round_trip_through_the_real_runtime(agent_front: Gateway) -> None:
    """A tool_use comes back with the worker's id and parsed input; its tool_result gets the final answer."""
    client = client_for(agent_front)
    first = client.messages.create(model="org/tiny", max_tokens=64, messages=ASK, tools=[WEATHER])
    assert first.stop_reason == "tool_use"
    [call] = first.content
    assert call.type == "tool_use" and (call.name, call.input) == ("get_weather", {"city": "Paris"})
    assert call.id  # mlx_lm's own call id, passed through
    history: Any = [
        *ASK,
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "20 C"}]},
    ]
    second = client.messages.create(model="org/tiny", max_tokens=64, messages=history, tools=[WEATHER])
    assert second.stop_reason == "end_turn"
    assert [(block.type, getattr(block, "text", None)) for block in second.content] == [("text", AGENT_ANSWER)]


def test_streamed_tool_round_trip_through_the_real_runtime(agent_front: Gateway) -> None:
    """Streamed, the tool_use block carries input_json_delta the SDK assembles; the reply to its result streams."""
    client = client_for(agent_front)
    with client.messages.stream(model="org/tiny", max_tokens=64, messages=ASK, tools=[WEATHER]) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_message()
    assert "input_json" in kinds
    assert first.stop_reason == "tool_use"
    [call] = first.content
    assert call.type == "tool_use" and call.input == {"city": "Paris"}
    history: Any = [
        *ASK,
        {"role": "assistant", "content": [call.model_dump()]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": [{"type": "text", "text": "20 C"}]}],
        },
    ]
    with client.messages.stream(model="org/tiny", max_tokens=64, messages=history, tools=[WEATHER]) as stream:
        assert "".join(stream.text_stream) == AGENT_ANSWER
        assert stream.get_final_message().stop_reason == "end_turn"


def test_reasoning_comes_back_as_a_thinking_block(agent_front: Gateway) -> None:
    """The runtime's separated reasoning is a thinking block before the text, plain and streamed."""
    client = client_for(agent_front)
    message = client.messages.create(model="org/tiny", max_tokens=64, messages=ASK)
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].type == "thinking" and message.content[0].thinking == AGENT_THOUGHT
    with client.messages.stream(model="org/tiny", max_tokens=64, messages=ASK) as stream:
        streamed = stream.get_final_message()
    assert [block.model_dump(exclude_none=True) for block in streamed.content] == [
        {"type": "thinking", "thinking": AGENT_THOUGHT, "signature": ""},
        {"type": "text", "text": AGENT_ANSWER},
    ]


def test_tool_choice_none_sends_no_tools(agent_front: Gateway) -> None:
    """With tool_choice none the template sees no tools, so this model answers instead of calling one."""
    message = client_for(agent_front).messages.create(
        model="org/tiny", max_tokens=64, messages=ASK, tools=[WEATHER], tool_choice={"type": "none"}
    )
    assert message.stop_reason == "end_turn" and message.content[-1].type == "text"


# -- the stand-in worker --------------------------------------------------------------------------------------


def test_fragmented_tool_arguments_and_the_body_the_worker_gets(stand_in_front: Gateway) -> None:
    """Arguments streamed in pieces assemble into the input; the worker got the translated body with its own limit."""
    stand_in = stand_in_front
    seen = len(sent_bodies(stand_in))  # what the shared stand-in received before this test
    client = client_for(stand_in)
    with client.messages.stream(
        model="org/tiny",
        max_tokens=5000,
        messages=ASK,
        tools=[WEATHER],
        system="Be brief.",
        stop_sequences=["END"],
        extra_body={"temperature": 0.3, "top_k": 5},
    ) as stream:  # no SDK arguments
        message = stream.get_final_message()
    assert [(b.type, getattr(b, "id", None), getattr(b, "input", None)) for b in message.content] == [
        ("tool_use", "call_stand_in_1", {"city": "Paris"})
    ]
    assert message.usage.input_tokens == 7 and message.usage.cache_read_input_tokens == 4
    [body] = sent_bodies(stand_in)[seen:]
    assert body == {
        "model": "default_model",
        "max_tokens": 5000,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "system", "content": "Be brief."}, *ASK],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": WEATHER["description"],
                    "parameters": WEATHER["input_schema"],
                },
            }
        ],
        "temperature": 0.3,
        "top_k": 5,
        "stop": ["END"],
    }


def test_a_stream_the_worker_breaks_raises_in_the_client(stand_in_front: Gateway) -> None:
    """A worker stream that ends without [DONE] ends with an error event, which the SDK raises."""
    client = client_for(stand_in_front)
    with pytest.raises(anthropic.APIStatusError) as info:
        list(
            client.messages.create(
                model="org/tiny", max_tokens=8, stream=True, messages=[{"role": "user", "content": "break"}]
            )
        )
    body: Any = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "api_error"


def test_an_open_message_stream_blocks_unload(stand_in: Gateway, tmp_path: Path) -> None:
    """While a /v1/messages stream is open, unload is refused with open_streams 1; after it ends, it works."""
    conn = http.client.HTTPConnection("127.0.0.1", stand_in.port, timeout=60)
    body = {"model": "org/tiny", "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "hold"}]}
    conn.request("POST", "/v1/messages", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    seen = b""
    while b"content_block_delta" not in seen:
        seen += response.readline()
    blocked = stand_in.control("POST", "unload")
    assert blocked.status == 409 and blocked.json()["error"]["open_streams"] == 1
    (tmp_path / "release").touch()
    events = read_sse(seen + response.read())
    conn.close()
    assert [name for name, _ in events][-2:] == ["message_delta", "message_stop"]
    assert stand_in.wait_state("loaded")["open_streams"] == 0
    assert stand_in.control("POST", "unload").status == 200


def test_api_keys_apply_and_their_refusal_has_anthropics_shape(tmp_path: Path) -> None:
    """With API keys the SDK's x-api-key is checked; a wrong key is an authentication_error."""
    with stand_in_gateway(tmp_path, api_keys=["right-key"]) as gateway:
        with pytest.raises(anthropic.AuthenticationError) as info:
            client_for(gateway, "wrong-key").messages.create(model="org/tiny", max_tokens=8, messages=ASK)
        body: Any = info.value.body
        assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
        assert gateway.status()["loads"] == 0
        message = client_for(gateway, "right-key").messages.create(model="org/tiny", max_tokens=8, messages=ASK)
        assert message.content[0].type == "text" and message.content[0].text == "Hello from the stand-in"


def test_the_models_listing_names_concrete_models_with_their_window(tiny_model: Path, tmp_path: Path) -> None:
    """Both SDKs list the served name and literal aliases with window and ceiling; a glob is no id, yet resolves."""
    import openai

    with running_gateway(
        tmp_path,
        real_worker_argv(tiny_model, MAX_TOKENS),
        model_path=tiny_model,
        served_model_name="local-coder",
        alias=["claude-local", "claude-*"],
        context_window=32768,
        max_tokens_ceiling=4096,
    ) as gateway:
        client = client_for(gateway)
        listed = [(m.id, m.max_input_tokens, m.max_tokens) for m in client.models.list()]
        assert listed == [("local-coder", 32768, 4096), ("claude-local", 32768, 4096)]
        matched = client.models.retrieve("claude-sonnet-4-5")
        assert (matched.id, matched.max_input_tokens, matched.max_tokens) == ("claude-sonnet-4-5", 32768, 4096)
        plain = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="local", max_retries=0).models.list()
        entries = [m.model_dump() for m in plain]
        assert [(e["id"], e["context_length"], e["max_model_len"], e["max_output_tokens"]) for e in entries] == [
            ("local-coder", 32768, 32768, 4096),
            ("claude-local", 32768, 32768, 4096),
        ]
        assert entries[0]["aliases"] == ["claude-local", "claude-*"] and entries[1]["alias_of"] == "local-coder"
        assert "max_input_tokens" not in entries[0]  # the Anthropic fields come with an anthropic-version header
