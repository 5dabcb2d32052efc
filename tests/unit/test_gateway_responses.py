"""OpenAI Responses translation: golden request bodies, refusals, Response objects and the store (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.responses.output import base_response, response_from_chat
from mlx_agent.gateway.responses.request import to_chat
from mlx_agent.gateway.responses.store import ResponseStore

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def refused(body: Any) -> RequestRefused:
    """Return the refusal ``to_chat`` raises for ``body``."""
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
    }
    assert (translated.stream, translated.store, translated.model) == (True, False, "org/tiny")
    assert translated.echo["parallel_tool_calls"] is False and translated.echo["prompt_cache_key"] == "thread-1"


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
            "input[0].content[0]",
            "unsupported_content",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]},
            "input[0].content[0]",
            "unsupported_content",
        ),
        (
            {
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "c",
                        "output": [{"type": "input_image", "image_url": "x"}],
                    }
                ]
            },
            "input[0].content[0]",
            "unsupported_content",
        ),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type", "unsupported_content"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type", "unsupported_tool"),
        ({"input": "x", "tools": [{"type": "custom", "name": "grammar"}]}, "tools[0].type", "unsupported_tool"),
        ({"input": "x", "tools": [{**WEATHER, "strict": True}]}, "tools[0].strict", "unsupported_tool"),
        ({"input": "x", "reasoning": {"effort": "high"}}, "reasoning", "unsupported_parameter"),
        ({"input": "x", "include": ["message.output_text.logprobs"]}, "include", "unsupported_parameter"),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "n", "schema": {}}}},
            "text",
            "unsupported_parameter",
        ),
        ({"input": "x", "text": {"format": {"type": "json_object"}}}, "text", "unsupported_parameter"),
        ({"input": "x", "tool_choice": "required"}, "tool_choice", "unsupported_tool_choice"),
        (
            {"input": "x", "tool_choice": {"type": "function", "name": "get_weather"}},
            "tool_choice",
            "unsupported_tool_choice",
        ),
        ({"input": "x", "previous_response_id": "resp_1"}, "previous_response_id", "unsupported_parameter"),
        ({"input": "x", "conversation": "conv_1"}, "conversation", "unsupported_parameter"),
        ({"input": "x", "truncation": "auto"}, "truncation", "unsupported_parameter"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "invalid_type"),
        ({"input": []}, "input", "invalid_value"),
    ],
)
def test_what_the_runtime_cannot_honour_is_refused(body: dict[str, Any], param: str, code: str) -> None:
    """Each refusal is a 400 invalid_request_error naming the offending field."""
    refusal = refused(body)
    assert (refusal.status, refusal.type_, refusal.param, refusal.code) == (400, "invalid_request_error", param, code)


def test_golden_response_with_text_and_a_function_call() -> None:
    """A worker reply becomes a message item and a function_call item, completed, with Responses usage."""
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
                    "reasoning": "dropped",
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
        "metadata": {"k": "v"},
        "output": [
            {
                "id": "msg_1",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking.", "annotations": [], "logprobs": []}],
            },
            {
                "id": "fc_2",
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
