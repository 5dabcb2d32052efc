"""OpenAI Responses translation: golden request bodies, refusals, Response objects and the store (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.responses import request
from mlx_agent.gateway.responses.bodies import ResponsesBody
from mlx_agent.gateway.responses.compact import (
    SUMMARY_REQUEST,
    CompactionStream,
    compacted,
    compaction_item,
    is_trigger,
    summary_of,
    summary_request,
)
from mlx_agent.gateway.responses.output import base_response, conversation_of, response_from_chat
from mlx_agent.gateway.responses.request import SUMMARY_LEAD, SUMMARY_MARK, ResponsesRequest
from mlx_agent.gateway.responses.store import ResponseStore

pytestmark = pytest.mark.fast

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def parsed(body: dict[str, Any]) -> ResponsesBody:
    """Return ``body`` parsed by the Responses declaration, as the front's endpoint does (400 if it refuses)."""
    return parse(ResponsesBody, body)


def to_chat(body: dict[str, Any], **kwargs: Any) -> ResponsesRequest:
    """Return the translation of ``body`` after its declaration parsed it."""
    return request.to_chat(parsed(body), **kwargs)


def refused(body: Any) -> RequestRefused:
    """Return the refusal the declaration or the translator gives ``body``."""
    with pytest.raises(RequestRefused) as info:
        to_chat(body, default_model="org/tiny")
    return info.value


def sequence_ids() -> Any:
    """Return an id maker that counts: ``msg_1``, ``fc_2``, ..."""
    counter = iter(range(1, 1000))
    return lambda prefix: f"{prefix}_{next(counter)}"


def test_golden_body_of_a_function_call_round_trip() -> None:
    """Instructions, developer and user messages, a function call and its output, tools and sampling translate."""
    translated = to_chat(
        {
            "model": "org/tiny",
            "instructions": "Be terse.",
            "max_output_tokens": 100,
            "temperature": 0.2,
            "top_p": 0.8,
            "stream": True,
            "tools": [WEATHER],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "prompt_cache_key": "thread-1",
            "client_metadata": {"app": "codex"},
            "reasoning": {},
            "include": ["reasoning.encrypted_content"],
            "store": False,
            "text": {"format": {"type": "text"}},
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Use tools."}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Weather?"},
                        {"type": "input_text", "text": "In Paris."},
                    ],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "id": "msg_0",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
                },
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
                {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city":"Lyon"}'},
                {"type": "function_call_output", "call_id": "call_1", "output": "20 C"},
                {
                    "type": "function_call_output",
                    "call_id": "call_2",
                    "output": [{"type": "input_text", "text": "18 C"}],
                },
            ],
        },
        default_model="org/tiny",
    )
    assert translated.chat == {
        "model": "org/tiny",
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "system", "content": "Use tools."},
            {"role": "user", "content": "Weather?\n\nIn Paris."},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Lyon"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "20 C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "18 C"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather in a city.",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "max_tokens": 100,
        "temperature": 0.2,
        "top_p": 0.8,
        "stream": True,
        "parallel_tool_calls": False,
    }
    assert (translated.stream, translated.store, translated.model) == (True, False, "org/tiny")
    assert translated.echo["parallel_tool_calls"] is False and translated.echo["prompt_cache_key"] == "thread-1"


def test_what_codex_sends_is_accepted() -> None:
    """Codex's fields are honoured or accepted: effort, summary, verbosity, strict, namespaces, hosted tools."""
    translated = to_chat(
        {
            "model": "gpt-5-codex",
            "input": [
                {"type": "message", "id": "msg_a", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
                {"type": "reasoning", "id": "rs_0", "summary": [], "encrypted_content": None},
                {"type": "function_call", "call_id": "c0", "name": "spawn", "namespace": "agents", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c0", "output": "spawned"},
                {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"},
            ],
            "tools": [
                {**WEATHER, "strict": True},
                {
                    "type": "namespace",
                    "name": "agents",
                    "description": "Sub-agents.",
                    "tools": [{"type": "function", "name": "spawn", "strict": False, "parameters": {"type": "object"}}],
                },
                {
                    "type": "custom",
                    "name": "apply_patch",
                    "description": "Patch files.",
                    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
                },
                {"type": "web_search", "external_web_access": False},
                {"type": "image_generation"},
                {  # as Codex 0.171.0 sends it with a catalogued model
                    "type": "tool_search",
                    "execution": "client",
                    "description": "# Tool discovery",
                    "parameters": {
                        "type": "object",
                        "properties": {"limit": {"type": "number"}, "query": {"type": "string"}},
                        "required": ["query"],
                        "additionalProperties": False,
                    },
                },
            ],
            "reasoning": {"effort": "medium", "summary": "auto"},
            "text": {"verbosity": "low"},
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "thread-1",
            "client_metadata": {"x-codex-turn-metadata": "{}"},
            "user": "someone",
            "service_tier": "auto",
            "truncation": "auto",
            "stream": True,
        },
        default_model="gpt-5-codex",
    )
    chat = translated.chat
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather", "agents__spawn", "apply_patch"]
    assert chat["tools"][2]["function"]["parameters"]["required"] == ["input"]
    assert translated.tools.dropped == ["web_search", "image_generation", "tool_search"]
    assert chat["reasoning_effort"] == "medium"
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "tool", "assistant", "tool"]
    assert chat["messages"][1]["tool_calls"][0]["function"]["name"] == "agents__spawn"
    assert chat["messages"][3]["tool_calls"][0]["function"]["arguments"] == '{"input": "*** Begin Patch"}'


def test_structured_text_formats_become_an_enforced_response_format() -> None:
    """text.format json_object and json_schema reach the worker as response_format."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    named = to_chat(
        {"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": schema}}}, default_model="m"
    )
    assert named.chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    plain = to_chat({"input": "x", "text": {"format": {"type": "json_object"}}}, default_model="m")
    assert plain.chat["response_format"] == {"type": "json_object"}


def test_a_previous_response_continues_its_stored_conversation() -> None:
    """previous_response_id puts the stored input and answer before the new input; instructions stay per request."""
    first = to_chat({"input": "Weather?", "instructions": "Be terse.", "tools": [WEATHER]}, default_model="m")
    doc = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "content": "Looking.",
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
            }
        ]
    }
    response = response_from_chat(doc, base_response(first, "resp_1", 0), sequence_ids(), tools=first.tools)
    store = ResponseStore()
    store.put(response, None, conversation_of(first, response))
    history = store.conversation("resp_1", None)
    assert store.conversation("resp_1", "someone-else") is None
    second = to_chat(
        {
            "input": [{"type": "function_call_output", "call_id": "call_9", "output": "-3 C"}],
            "previous_response_id": "resp_1",
        },
        default_model="m",
        history=history,
    )
    assert second.chat["messages"] == [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "-3 C"},
    ]
    assert second.echo["previous_response_id"] == "resp_1"


def test_a_string_input_is_one_user_message_and_the_model_defaults() -> None:
    """A string input is one user message; with no model the gateway's model is reported."""
    translated = to_chat({"input": "Hi"}, default_model="org/tiny")
    assert translated.chat == {"messages": [{"role": "user", "content": "Hi"}], "stream": False}
    assert (translated.model, translated.store, translated.background) == ("org/tiny", True, False)


def test_tool_choice_none_sends_no_tools_but_echoes_them() -> None:
    """tool_choice none keeps the tools out of the prompt; the Response still lists them."""
    translated = to_chat({"input": "Hi", "tools": [WEATHER], "tool_choice": "none"}, default_model="m")
    assert "tools" not in translated.chat
    assert translated.echo["tools"][0]["name"] == "get_weather" and translated.echo["tool_choice"] == "none"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,x"}]}]},
            "input.0.content.0.image_url",
            "image_invalid",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
            "input.0.content.0",
            "media_unsupported",
        ),
        (
            {
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "c",
                        "output": [{"type": "input_file", "file_id": "file-1"}],
                    }
                ]
            },
            "input.0.output.0",
            "media_unsupported",
        ),
        ({"input": "x", "tool_choice": "required"}, "tool_choice", "unsupported_tool_choice"),
        (
            {"input": "x", "tool_choice": {"type": "function", "name": "get_weather"}},
            "tool_choice",
            "unsupported_tool_choice",
        ),
        ({"input": "x", "conversation": "conv_1"}, "conversation", "unsupported_parameter"),
        ({"input": "x", "prompt": {"id": "pmpt_1"}}, "prompt", "unsupported_parameter"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0.type", "unsupported_content"),
        ({"input": "x", "tools": [{"type": "local_shell"}]}, "tools.0.type", "unsupported_tool"),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format", "invalid_value"),
        ({"input": "x", "truncation": "middle"}, "truncation", "invalid_value"),
        ({"input": "x", "include": [{}]}, "include.0", "invalid_type"),
        ({"input": "x", "reasoning": {"effort": 3}}, "reasoning.effort", "invalid_value"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
        ({"input": []}, "input", "invalid_value"),
    ],
)
def test_what_the_runtime_cannot_honour_is_refused(body: dict[str, Any], param: str, code: str) -> None:
    """Each refusal is a 400 invalid_request_error naming the offending field."""
    refusal = refused(body)
    assert (refusal.status, refusal.type_, refusal.param, refusal.code) == (400, "invalid_request_error", param, code)


def test_golden_response_with_text_and_a_function_call() -> None:
    """A worker reply becomes reasoning, message and function_call items, completed, with Responses usage."""
    translated = to_chat(
        {"model": "org/tiny", "input": "Weather?", "tools": [WEATHER], "metadata": {"k": "v"}}, default_model="org/tiny"
    )
    base = base_response(translated, "resp_0", 1700000000)
    doc = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Checking.",
                    "reasoning": "Need the weather.",
                    "tool_calls": [
                        {
                            "id": "call-9",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 12}},
    }
    assert response_from_chat(doc, base, sequence_ids()) == {
        "id": "resp_0",
        "object": "response",
        "created_at": 1700000000,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": "org/tiny",
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "prompt_cache_key": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Weather in a city.",
                "parameters": WEATHER["parameters"],
                "strict": False,
            }
        ],
        "top_p": None,
        "truncation": "disabled",
        "user": None,
        "metadata": {"k": "v"},
        "output": [
            {
                "id": "rs_1",
                "type": "reasoning",
                "status": "completed",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Need the weather."}],
            },
            {
                "id": "msg_2",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}],
            },
            {
                "id": "fc_3",
                "type": "function_call",
                "status": "completed",
                "call_id": "call-9",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
            },
        ],
        "usage": {
            "input_tokens": 30,
            "input_tokens_details": {"cached_tokens": 12, "cache_write_tokens": 0},
            "output_tokens": 7,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 37,
        },
    }


def test_a_cut_answer_is_incomplete() -> None:
    """finish_reason length makes the response and its message incomplete, for max_output_tokens."""
    base = base_response(to_chat({"input": "x"}, default_model="m"), "resp_0", 0)
    doc = {
        "choices": [{"finish_reason": "length", "message": {"content": "Once upon"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    response = response_from_chat(doc, base)
    assert (response["status"], response["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert response["output"][0]["status"] == "incomplete"


def test_the_store_keeps_the_most_recent_per_key() -> None:
    """The store keeps the newest responses up to its capacity, and only the key that made one reads it."""
    store = ResponseStore(capacity=3)
    for index in range(5):
        store.put({"id": f"resp_{index}", "output": []}, "alice")
    assert len(store) == 3
    assert store.get("resp_0", "alice") is None and store.get("resp_4", "alice") == {"id": "resp_4", "output": []}
    assert store.get("resp_4", "bob") is None and store.get("resp_4", None) is None
    kept = store.get("resp_3", "alice")
    assert kept is not None
    kept["output"].append("changed")
    assert store.get("resp_3", "alice") == {"id": "resp_3", "output": []}  # a copy: callers cannot change it


CODEX_HISTORY = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions/>"}]},
    {"type": "message", "id": "msg_u", "role": "user", "content": [{"type": "input_text", "text": "Cat the notes."}]},
    {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": '{"cmd": "cat n0.txt"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "alpha"},
]


def test_a_compaction_asks_for_a_summary_after_the_conversation_as_a_turn_sends_it() -> None:
    """The summary request is the turn's own chat body (same prefix, tools kept) plus one user message."""
    body = {"model": "gpt-5-codex", "instructions": "Be brief.", "input": CODEX_HISTORY, "tools": [WEATHER]}
    turn = to_chat(body, default_model="org/tiny").chat
    trigger = parsed({**body, "input": [*CODEX_HISTORY, {"type": "compaction_trigger"}]})
    asked = summary_request(trigger, default_model="m")
    assert asked.chat["messages"][:-1] == turn["messages"] and asked.chat["tools"] == turn["tools"]
    assert asked.chat["messages"][-1] == {"role": "user", "content": SUMMARY_REQUEST}
    assert asked.chat["stream"] is False and "<summary>" in SUMMARY_REQUEST
    assert is_trigger(trigger) and not is_trigger(parsed(body))


def test_a_compaction_asks_for_its_summary_as_plain_text_whatever_the_turns_format() -> None:
    """A text.format of the conversation (a self-referencing schema here) is not enforced on the summary."""
    fmt = {"type": "json_schema", "name": "tree", "schema": {"$ref": "#"}}
    body = {"model": "m", "input": [*CODEX_HISTORY, {"type": "compaction_trigger"}], "text": {"format": fmt}}
    assert "response_format" in to_chat({**body, "input": CODEX_HISTORY}, default_model="m").chat
    assert "response_format" not in summary_request(parsed(body), default_model="m").chat


def test_the_compacted_history_keeps_the_user_messages_and_one_summary_item() -> None:
    """/v1/responses/compact answers the user messages, as sent, then a compaction item holding the summary."""
    doc = {
        "choices": [{"message": {"content": "<summary>Read n0.txt: alpha. Next: n1.txt.</summary>"}}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 12},
    }
    made = compacted(parsed({"input": CODEX_HISTORY}), doc, 1700000000, sequence_ids())
    assert made["object"] == "response.compaction" and made["created_at"] == 1700000000
    assert made["output"] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Cat the notes."}]},
        {"id": "cmp_1", "type": "compaction", "encrypted_content": SUMMARY_MARK + "Read n0.txt: alpha. Next: n1.txt."},
    ]
    assert (made["usage"]["input_tokens"], made["usage"]["output_tokens"]) == (900, 12)


def test_a_compaction_item_sent_back_is_the_summary_as_a_user_message() -> None:
    """A later turn reads this front's compaction item as a user message and refuses another server's."""
    item = compaction_item("Read n0.txt.", sequence_ids())
    chat = to_chat({"input": [CODEX_HISTORY[1], item]}, default_model="m").chat
    assert chat["messages"][-1] == {"role": "user", "content": SUMMARY_LEAD + "Read n0.txt."}
    foreign = refused({"input": [{"type": "compaction", "encrypted_content": "gAAAAABpM0Yj"}]})
    assert (foreign.param, foreign.code) == ("input.0.encrypted_content", "unsupported_content")


@pytest.mark.parametrize(
    ("text", "summary"),
    [("<summary>\nDone: a.\n</summary>", "Done: a."), ("Done: b.", "Done: b."), ("x <summary>cut sho", "cut sho")],
)
def test_the_summary_is_the_text_inside_its_tags_or_the_whole_text(text: str, summary: str) -> None:
    """A reply's summary is what its <summary> tags hold (to the end when cut), or all of it without tags."""
    assert summary_of(text) == summary


@pytest.mark.parametrize("text", ["", "<summary> </summary>", None])
def test_a_reply_without_a_summary_is_a_failed_compaction(text: str | None) -> None:
    """No summary text is a 502 compaction_failed, never an empty history."""
    with pytest.raises(RequestRefused) as info:
        summary_of(text)
    assert (info.value.status, info.value.code) == (502, "compaction_failed")


def test_a_streamed_compaction_sends_its_one_item_at_the_end() -> None:
    """The trigger's stream opens at once, sends nothing per token, and ends with one compaction item."""
    base = base_response(to_chat({"input": "x"}, default_model="m"), "resp_1", 1)
    stream = CompactionStream(base, sequence_ids())
    opening = stream.start()
    assert b"response.created" in opening and b"response.in_progress" in opening
    assert stream.data(b'{"choices": [{"index": 0, "delta": {"content": "<summary>Did a"}}]}') == b""
    [ping] = [json.loads(line[6:]) for line in stream.keepalive(b": keepalive").splitlines() if line[:6] == b"data: "]
    assert ping["type"] == "response.in_progress"  # an event: Codex's idle timeout does not count SSE comments
    stream.data(b'{"choices": [{"index": 0, "delta": {"content": ".</summary>"}, "finish_reason": "stop"}]}')
    events = [json.loads(line[6:]) for line in stream.finish().splitlines() if line.startswith(b"data: ")]
    assert [e["type"] for e in events] == [
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[-1]["response"]["output"] == [
        {"id": "cmp_1", "type": "compaction", "encrypted_content": SUMMARY_MARK + "Did a."}
    ]
    assert stream.ended and [e["sequence_number"] for e in events] == [3, 4, 5]


def test_a_streamed_compaction_without_text_fails() -> None:
    """A trigger whose reply has no summary ends with response.failed."""
    stream = CompactionStream(base_response(to_chat({"input": "x"}, default_model="m"), "resp_1", 1))
    stream.start()
    assert b"response.failed" in stream.finish() and stream.ended
