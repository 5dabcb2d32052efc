"""The OpenAI Responses API of the JIT gateway, driven by the official ``openai`` SDK.

Three workers stand behind the gateway, each for what it shows:

* the real wrapped mlx_lm.server on the tiny random-weight model: plain and streamed text (cut by the plan's
  token limit, so ``incomplete``), stored responses, background requests, the accepted no-op parameters and
  the refusals;
* the real wrapped server on a scripted model (``tests.gateway_support.agent_model``): a random-weight model
  never chooses a tool, so this one is built to: its greedy next token depends only on the current token, and
  its chat template ends the generation prompt so that the chain it starts writes ``<tool_call>{...}
  </tool_call>`` when tools are offered and ``Sunny`` after a tool result. mlx_lm's own json_tools parser turns
  the call into an OpenAI tool call, so the function-call round trip runs through the real runtime, streamed
  and not, and ends ``completed``;
* a stand-in worker (``tests.gateway_support.CHAT_STAND_IN``) for what the runtime never does: arguments
  streamed in fragments, a stream that breaks off; and for many quick requests (the store's capacity).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from mlx_agent.gateway.responses.compact import SUMMARY_REQUEST
from mlx_agent.gateway.responses.request import SUMMARY_MARK
from tests.gateway_support import (
    AGENT_ANSWER,
    Gateway,
    sent_bodies,
    stand_in_gateway,
)

pytestmark = pytest.mark.e2e
MAX_TOKENS = 8
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def keyed_stand_in(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Run one front with the keys alice-key and bob-key over the chat stand-in worker, for the per-key tests."""
    with stand_in_gateway(tmp_path_factory.mktemp("keyed-stand-in"), api_keys=["alice-key", "bob-key"]) as gateway:
        yield gateway


def client_for(gateway: Gateway, key: str = "local") -> openai.OpenAI:
    """Return the official client pointed at the gateway (no retries: a test sees the first answer)."""
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=key, timeout=120, max_retries=0)


# -- the real model -------------------------------------------------------------------------------------------


def test_plain_response_from_the_real_model_is_stored(tiny_front: Gateway) -> None:
    """A response is incomplete at the plan's token limit, names the client's model, and can be retrieved."""
    client = client_for(tiny_front)
    response = client.responses.create(model="org/tiny", input=ASK, instructions="Be brief.", max_output_tokens=1000)
    assert response.object == "response" and response.model == "org/tiny" and response.id.startswith("resp_")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text and response.instructions == "Be brief."
    assert response.usage is not None and response.usage.output_tokens == MAX_TOKENS
    assert response.usage.input_tokens > 0
    assert client.responses.retrieve(response.id).model_dump() == response.model_dump()
    unstored = client.responses.create(model="org/tiny", input=ASK, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_streamed_response_follows_the_event_sequence(tiny_front: Gateway) -> None:
    """The stream opens with created and in_progress, streams text deltas, and ends with response.incomplete."""
    client = client_for(tiny_front)
    events = list(client.responses.create(model="org/tiny", input=ASK, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    final = events[-1]
    assert final.type == "response.incomplete"
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.response.output_text == streamed
    plain = client.responses.create(model="org/tiny", input=ASK)
    assert plain.output_text == streamed  # greedy: the same answer either way
    assert client.responses.retrieve(final.response.id).status == "incomplete"  # streamed responses are stored


def test_background_requests_complete_before_the_reply(tiny_front: Gateway) -> None:
    """A background request returns the finished response, not a queued one."""
    response = client_for(tiny_front).responses.create(model="org/tiny", input=ASK, background=True)
    assert response.background is True and response.status == "incomplete" and response.output_text


def test_accepted_parameters_do_not_change_the_answer(tiny_front: Gateway) -> None:
    """parallel_tool_calls, prompt_cache_key, client_metadata, an empty reasoning and the include are accepted."""
    client = client_for(tiny_front)
    plain = client.responses.create(model="org/tiny", input=ASK)
    accepted = client.responses.create(
        model="org/tiny",
        input=ASK,
        parallel_tool_calls=False,
        prompt_cache_key="thread-1",
        reasoning={},
        include=["reasoning.encrypted_content"],
        extra_body={"client_metadata": {"client": "tests"}},
    )
    assert accepted.output_text == plain.output_text
    assert accepted.parallel_tool_calls is False and accepted.prompt_cache_key == "thread-1"


REFUSALS: Any = {
    "image": {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "What is this?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
                ],
            }
        ]
    },
    "file": {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
    "client_shell_tool": {"tools": [{"type": "local_shell"}]},
    "forced_tool_choice": {"tools": [WEATHER], "tool_choice": "required"},
    "named_tool_choice": {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}},
    "previous_response_id": {"previous_response_id": "resp_123"},
    "stored_conversation": {"conversation": "conv_123"},
}


def test_an_unknown_model_is_not_found(tiny_front: Gateway) -> None:
    """A model the front does not serve is a 404 the SDK raises as NotFoundError."""
    with pytest.raises(openai.NotFoundError) as info:
        client_for(tiny_front).responses.create(model="someone/else", input=ASK)
    assert "org/tiny" in str(info.value)


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_what_the_runtime_cannot_honour_is_refused(tiny_front: Gateway, case: str) -> None:
    """Each refusal is a 400 invalid_request_error the SDK raises as BadRequestError."""
    request = {"model": "org/tiny", "input": ASK, **REFUSALS[case]}
    with pytest.raises(openai.BadRequestError) as info:
        client_for(tiny_front).responses.create(**request)
    body: Any = info.value.body
    assert body["type"] == "invalid_request_error" and body["message"]


# -- the scripted agent model -----------------------------------------------------------------------------


def test_function_call_round_trip_through_the_real_runtime(agent_front: Gateway) -> None:
    """A function_call item comes back; its function_call_output gets the final answer, completed."""
    client = client_for(agent_front)
    first = client.responses.create(model="org/tiny", input=ASK, tools=[WEATHER])
    assert first.status == "completed"
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    history: Any = [
        {"role": "user", "content": ASK},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "20 C"},
    ]
    second = client.responses.create(model="org/tiny", input=history, tools=[WEATHER])
    assert (second.status, second.output_text) == ("completed", AGENT_ANSWER)


def test_streamed_function_call_round_trip_through_the_real_runtime(agent_front: Gateway) -> None:
    """Streamed, the call arrives as argument events the SDK's stream helper assembles; then the answer streams."""
    client = client_for(agent_front)
    with client.responses.stream(model="org/tiny", input=ASK, tools=[WEATHER]) as stream:
        kinds = [event.type for event in stream]
        first = stream.get_final_response()
    assert kinds[-5:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    [call] = first.output
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Paris"}
    history: Any = [
        {"role": "user", "content": ASK},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "20 C"},
    ]
    with client.responses.stream(model="org/tiny", input=history, tools=[WEATHER]) as stream:
        text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == AGENT_ANSWER and (final.status, final.output_text) == ("completed", AGENT_ANSWER)


def test_tool_choice_none_sends_no_tools(agent_front: Gateway) -> None:
    """With tool_choice none the template sees no tools, so this model thinks and answers instead of calling one."""
    response = client_for(agent_front).responses.create(
        model="org/tiny", input=ASK, tools=[WEATHER], tool_choice="none"
    )
    assert [item.type for item in response.output] == ["reasoning", "message"]
    assert response.output_text == AGENT_ANSWER


# -- the stand-in worker --------------------------------------------------------------------------------------


def test_fragmented_arguments_and_the_body_the_worker_gets(stand_in_front: Gateway) -> None:
    """Arguments streamed in pieces assemble into one call; the worker got the translated body with its own limit."""
    gateway = stand_in_front
    seen = len(sent_bodies(gateway))  # what the shared stand-in received before this test
    with client_for(gateway).responses.stream(
        model="org/tiny",
        input=ASK,
        tools=[WEATHER],
        instructions="Be brief.",
        max_output_tokens=5000,
        temperature=0.3,
    ) as stream:
        deltas = [event.delta for event in stream if event.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    [body] = sent_bodies(gateway)[seen:]
    assert deltas == ['{"city": ', '"Paris"}']
    [call] = final.output
    assert call.type == "function_call" and (call.call_id, call.arguments) == ("call_stand_in_1", '{"city": "Paris"}')
    assert final.usage is not None and final.usage.input_tokens_details.cached_tokens == 4
    assert body == {
        "model": "default_model",
        "max_tokens": 5000,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": ASK}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": WEATHER["description"],
                    "parameters": WEATHER["parameters"],
                },
            }
        ],
        "temperature": 0.3,
    }


def test_a_stream_the_worker_breaks_ends_failed(stand_in_front: Gateway) -> None:
    """A worker stream that ends without [DONE] ends with response.failed, which is stored as failed."""
    client = client_for(stand_in_front)
    events = list(client.responses.create(model="org/tiny", input="break", stream=True))
    assert events[-1].type == "response.failed"
    assert events[-1].response.error is not None and events[-1].response.error.code == "server_error"
    assert client.responses.retrieve(events[-1].response.id).status == "failed"


def test_stored_responses_are_the_last_64_and_per_key(keyed_stand_in: Gateway) -> None:
    """The store keeps the 64 most recent responses; another API key cannot read them."""
    gateway = keyed_stand_in
    alice, bob = client_for(gateway, "alice-key"), client_for(gateway, "bob-key")
    ids = [alice.responses.create(model="org/tiny", input=f"question {i}").id for i in range(65)]
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(ids[0])
    assert alice.responses.retrieve(ids[1]).output_text == "Hello from the stand-in"
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(ids[-1])
    with pytest.raises(openai.AuthenticationError):
        client_for(gateway, "mallory").responses.retrieve(ids[-1])


COMPACT_INPUT: Any = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "And in Rome?"}]},
]


def test_compact_endpoint_summarises_through_the_served_model(tiny_front: Gateway) -> None:
    """POST /v1/responses/compact keeps the user messages and adds the model's own answer to the summary request."""
    client = client_for(tiny_front)
    compacted = client.responses.compact(model="org/tiny", input=COMPACT_INPUT, instructions="Be brief.")
    doc = compacted.model_dump(warnings=False)
    assert doc["object"] == "response.compaction" and doc["id"].startswith("resp_")
    users, [item] = doc["output"][:2], doc["output"][2:]
    assert [u["content"][0]["text"] for u in users] == [ASK, "And in Rome?"]
    assert item["type"] == "compaction" and item["encrypted_content"].startswith(SUMMARY_MARK)
    chat = client.chat.completions.create(
        model="org/tiny",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": "Let me look."},
            {"role": "user", "content": "And in Rome?"},
            {"role": "user", "content": SUMMARY_REQUEST},
        ],
    )
    assert item["encrypted_content"] == SUMMARY_MARK + (chat.choices[0].message.content or "").strip()
    assert doc["usage"]["input_tokens"] > 0 and doc["usage"]["output_tokens"] == MAX_TOKENS
    follow = client.responses.create(model="org/tiny", input=[*doc["output"], {"role": "user", "content": "Go on."}])
    assert follow.status == "incomplete" and follow.output_text  # the compacted history is accepted as input
    stored = client.responses.create(model="org/tiny", input=ASK)
    continued = client.responses.compact(model="org/tiny", previous_response_id=stored.id, input="And in Rome?")
    kept = continued.model_dump(warnings=False)["output"]
    assert [k["content"][0]["text"] for k in kept[:-1]] == [ASK, "And in Rome?"] and kept[-1]["type"] == "compaction"


def test_a_compaction_trigger_streams_one_compaction_item(tiny_front: Gateway) -> None:
    """A /v1/responses stream whose input ends with compaction_trigger ends with exactly one compaction item."""
    client = client_for(tiny_front)
    trigger: Any = [*COMPACT_INPUT, {"type": "compaction_trigger"}]
    events = list(client.responses.create(model="org/tiny", input=trigger, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert set(kinds[2:-3]) <= {"response.in_progress"}  # the front's keep-alives while the summary is written
    assert kinds[-3:] == ["response.output_item.added", "response.output_item.done", "response.completed"]
    [item] = events[-1].model_dump()["response"]["output"]
    whole = client.responses.compact(model="org/tiny", input=COMPACT_INPUT).model_dump(warnings=False)["output"][-1]
    assert item["type"] == "compaction" and item["encrypted_content"] == whole["encrypted_content"]


def test_compact_is_not_taken_for_a_stored_response_id(tiny_front: Gateway) -> None:
    """GET /v1/responses/compact is still a lookup (404), and a malformed compaction body is a 400 naming it."""
    client = client_for(tiny_front)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("compact")
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/responses/compact", body={"model": "org/tiny", "input": 5}, cast_to=object)
    assert info.value.body is not None and "input" in json.dumps(info.value.body)


ITEMS_INPUT: Any = [
    {"role": "developer", "content": "Be brief."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]},
    {"type": "function_call", "id": "fc_mine", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
]


def test_input_items_are_listed_and_a_response_deleted_by_its_key_only(keyed_stand_in: Gateway) -> None:
    """The SDK pages through a response's input items and deletes it; another key and unknown ids get 404."""
    gateway = keyed_stand_in
    alice, bob = client_for(gateway, "alice-key"), client_for(gateway, "bob-key")
    response = alice.responses.create(model="org/tiny", input=ITEMS_INPUT, tools=[WEATHER])
    first = alice.responses.input_items.list(response.id)
    assert [item.type for item in first.data] == ["function_call_output", "function_call", "message", "message"]
    assert first.data[1].id == "fc_mine" and all(item.id for item in first.data) and not first.has_more
    walked = list(alice.responses.input_items.list(response.id, limit=1, order="asc"))  # follows `after`
    assert [item.model_dump()["id"] for item in walked] == [item.id for item in reversed(first.data)]
    assert walked[0].model_dump()["role"] == "developer"
    included = alice.responses.input_items.list(response.id, include=["reasoning.encrypted_content"])
    assert [item.id for item in included.data] == [item.id for item in first.data]
    for bad in ({"limit": 0}, {"limit": 101}, {"order": "sideways"}, {"after": "msg_never"}):
        with pytest.raises(openai.BadRequestError) as info:
            alice.responses.input_items.list(response.id, **bad)
        assert info.value.code == "invalid_value", bad
    with pytest.raises(openai.BadRequestError) as typed:
        alice.responses.input_items.list(response.id, extra_query={"limit": "many"})
    assert typed.value.code == "invalid_type"
    for attempt in (bob.responses.input_items.list, bob.responses.delete, alice.responses.delete):
        with pytest.raises(openai.NotFoundError):
            attempt("resp_never_made")
    for foreign in (bob.responses.input_items.list, bob.responses.delete, bob.responses.retrieve):
        with pytest.raises(openai.NotFoundError) as other:
            foreign(response.id)
        assert other.value.code == "not_found"
    deleted = alice.responses.with_raw_response.delete(response.id)  # the SDK's delete() reads no body
    assert json.loads(deleted.text) == {"id": response.id, "object": "response", "deleted": True}
    for gone in (alice.responses.retrieve, alice.responses.input_items.list, alice.responses.delete):
        with pytest.raises(openai.NotFoundError):
            gone(response.id)


SELF_REFERENCING: Any = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
    "required": ["name", "children"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("schema", [SELF_REFERENCING, {"$ref": "#"}])
def test_compact_with_a_self_referencing_text_format_summarises_as_plain_text(tiny_front: Gateway, schema: Any) -> None:
    """A compaction whose conversation asks for a recursive text.format gives the plain summary, never a 502."""
    client = client_for(tiny_front)
    fmt = {"format": {"type": "json_schema", "name": "tree", "schema": schema, "strict": True}}
    plain = client.responses.compact(model="org/tiny", input=COMPACT_INPUT, instructions="Be brief.")
    body = {"model": "org/tiny", "input": COMPACT_INPUT, "instructions": "Be brief.", "text": fmt}
    formatted = tiny_front.request("POST", "/v1/responses/compact", body)
    assert formatted.status == 200, formatted.body
    doc = formatted.json()
    assert doc["output"][-1]["encrypted_content"] == plain.model_dump(warnings=False)["output"][-1]["encrypted_content"]
