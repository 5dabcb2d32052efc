"""Ollama requests translated into the worker's chat-completions body, and what is refused (pure)."""

from __future__ import annotations

import base64
import math
from typing import Any

import pytest

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.ollama.bodies import OllamaChatBody, OllamaGenerateBody
from mlx_agent.gateway.ollama.request import KEEP, OllamaRequest, parse_keep_alive, translate_chat, translate_generate

pytestmark = pytest.mark.fast

HI: Any = [{"role": "user", "content": "hi"}]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 24).decode()


def chat(**fields: Any) -> OllamaRequest:
    """Parse and translate a chat body."""
    return translate_chat(parse(OllamaChatBody, {"model": "tiny", "messages": HI, **fields}))


def generate(**fields: Any) -> OllamaRequest:
    """Parse and translate a generate body."""
    return translate_generate(parse(OllamaGenerateBody, {"model": "tiny", **fields}))


def refusal(call: Any, *args: Any, **kwargs: Any) -> RequestRefused:
    """Return the refusal ``call`` raises."""
    with pytest.raises(RequestRefused) as info:
        call(*args, **kwargs)
    return info.value


def test_ollama_streams_unless_told_not_to_and_the_worker_always_streams() -> None:
    """Stream absent is a stream (Ollama's default); the worker is asked for a stream either way."""
    assert chat().stream and chat(stream=True).stream and not chat(stream=False).stream
    assert chat(stream=False).chat["stream"] is True


def test_options_map_to_the_sampler() -> None:
    """Each sampler option reaches the chat body under its chat-completions name."""
    options = {
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "num_predict": 7,
        "stop": ["\n\n", "END"],
        "seed": 42,
        "repeat_penalty": 1.1,
        "repeat_last_n": 64,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "num_ctx": 8192,
        "num_gpu": 99,
        "mirostat": 0,
        "typical_p": 1.0,
    }
    body = chat(options=options).chat
    expected = {
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "max_tokens": 7,
        "stop": ["\n\n", "END"],
        "seed": 42,
        "repetition_penalty": 1.1,
        "repetition_context_size": 64,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
    }
    assert {k: body[k] for k in expected} == expected
    assert not {"num_ctx", "num_gpu", "mirostat", "typical_p", "options"} & set(body)


def test_server_limits_and_random_seeds_send_nothing() -> None:
    """num_predict -1 leaves the server's limit, a negative seed is unseeded, repeat_last_n 0 turns the penalty off."""
    body = chat(options={"num_predict": -1, "seed": -1, "stop": "x"}).chat
    assert "max_tokens" not in body and "seed" not in body and body["stop"] == ["x"]
    off = chat(options={"repeat_penalty": 1.3, "repeat_last_n": 0}).chat
    assert "repetition_penalty" not in off and "repetition_context_size" not in off


@pytest.mark.parametrize(
    ("options", "param", "code"),
    [
        ({"mirostat": 2}, "options.mirostat", Code.UNSUPPORTED_PARAMETER),
        ({"typical_p": 0.5}, "options.typical_p", Code.UNSUPPORTED_PARAMETER),
        ({"tfs_z": 0.9}, "options.tfs_z", Code.UNSUPPORTED_PARAMETER),
        ({"made_up": 1}, "options.made_up", Code.UNSUPPORTED_PARAMETER),
        ({"temperature": 9}, "options.temperature", Code.INVALID_VALUE),
        ({"num_predict": 0}, "options.num_predict", Code.INVALID_VALUE),
    ],
)
def test_options_the_runtime_cannot_honour_are_refused(options: dict[str, Any], param: str, code: Code) -> None:
    """A sampler the runtime lacks, an unknown option or an out-of-range value is a 400 naming the option."""
    refused = refusal(chat, options=options)
    assert (refused.status, refused.code, refused.param) == (400, code, param)


def test_format_goes_through_structured_output() -> None:
    """Format json is json_object; a schema is an enforced json_schema."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    assert chat(format="json").chat["response_format"] == {"type": "json_object"}
    assert chat(format=schema).chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "format", "schema": schema},
    }
    assert refusal(chat, format="yaml").param == "format"


def test_think_turns_reasoning_off_or_sets_its_effort() -> None:
    """Think false reaches the chat template; a level is reasoning_effort; true keeps the template's default."""
    assert chat(think=False).chat["chat_template_kwargs"] == {"enable_thinking": False}
    assert chat(think="high").chat["reasoning_effort"] == "high"
    assert not {"chat_template_kwargs", "reasoning_effort"} & set(chat(think=True).chat)


def test_tool_history_gets_ids_and_tool_results_answer_their_call() -> None:
    """Assistant calls (object arguments) become OpenAI calls; a tool message answers the call of its tool_name."""
    messages = [
        {"role": "user", "content": "weather and time?"},
        {
            "role": "assistant",
            "content": "",
            "thinking": "two tools",
            "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"function": {"name": "get_time", "arguments": {}}},
            ],
        },
        {"role": "tool", "tool_name": "get_time", "content": "noon"},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = chat(messages=messages, tools=tools).chat
    assistant, time_result, weather_result = body["messages"][1:]
    assert assistant == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        ],
    }
    assert (time_result["tool_call_id"], weather_result["tool_call_id"]) == ("call_2", "call_1")
    assert body["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]


def test_images_become_data_url_parts_before_the_text() -> None:
    """Base64 images precede the turn's text as image_url parts, typed by their bytes; a path is image_invalid."""
    message = {"role": "user", "content": "what is this?", "images": [PNG]}
    content = chat(messages=[message]).chat["messages"][0]["content"]
    assert content == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "text", "text": "what is this?"},
    ]
    for image in ("/tmp/cat.png", base64.b64encode(b"not an image").decode()):
        refused = refusal(chat, messages=[{**message, "images": [image]}])
        assert (refused.code, refused.param) == (Code.IMAGE_INVALID, "messages.0.images.0")
    assert generate(prompt="x", images=[PNG]).chat["messages"][0]["content"][0]["type"] == "image_url"


def test_generate_is_one_user_turn_after_its_system_prompt() -> None:
    """Prompt and system become the chat the worker's template renders."""
    body = generate(prompt="Once", system="Be brief").chat
    assert body["messages"] == [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Once"}]
    assert generate().load_only and not generate(prompt="x").load_only
    assert chat(messages=[]).load_only


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"template": "{{ .Prompt }}"}, "template"),
        ({"suffix": "return x"}, "suffix"),
        ({"context": [1, 2, 3]}, "context"),
        ({"logprobs": True}, "logprobs"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_generate_fields_that_would_be_silently_ignored_are_refused(fields: dict[str, Any], param: str) -> None:
    """Fields the reviewed template or the runtime cannot honour are 400 unsupported_parameter naming them."""
    refused = refusal(generate, prompt="x", **fields)
    assert (refused.code, refused.param) == (Code.UNSUPPORTED_PARAMETER, param)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (0, 0.0),
        ("0", 0.0),
        (300, 300.0),
        (2.5, 2.5),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("-1", KEEP),
        (-1, KEEP),
        ("-5m", KEEP),
    ],
)
def test_keep_alive_reads_seconds_and_go_durations(value: Any, seconds: float | None) -> None:
    """A number is seconds, a string a Go duration (or a bare number); below zero is keep."""
    assert parse_keep_alive(value) == seconds
    if seconds == KEEP:
        assert math.isinf(KEEP)


@pytest.mark.parametrize("value", ["5 minutes", "m", "", "5mm", True])
def test_a_keep_alive_that_is_no_duration_is_refused(value: Any) -> None:
    """Anything else is a 400 naming keep_alive."""
    assert refusal(parse_keep_alive, value).param == "keep_alive"


def test_a_raw_generate_is_a_text_completion_of_the_prompt_as_sent() -> None:
    """raw: true sends the prompt untouched (no template) with its sampler; system, images and think are refused."""
    translated = generate(prompt="<s>[INST] hi [/INST]", raw=True, options={"num_predict": 5}, format="json")
    assert translated.raw and not translated.load_only
    assert translated.chat == {
        "model": "tiny",
        "stream": True,
        "prompt": "<s>[INST] hi [/INST]",
        "max_tokens": 5,
        "response_format": {"type": "json_object"},
    }
    for name, value in (("system", "Be brief"), ("images", [PNG]), ("think", True)):
        refused = refusal(generate, prompt="x", raw=True, **{name: value})
        assert (refused.code, refused.param) == (Code.UNSUPPORTED_PARAMETER, name)
