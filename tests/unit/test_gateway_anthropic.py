"""Anthropic Messages translation: golden request bodies, refusals, replies and error shapes (pure)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from mlx_agent.agent_names import is_pattern
from mlx_agent.bodies import check
from mlx_agent.errors import BodyInvalid, RequestRefused
from mlx_agent.gateway.anthropic import request
from mlx_agent.gateway.anthropic.bodies import MessagesBody, PromptBody
from mlx_agent.gateway.anthropic.reply import message_from_chat, usage_of
from mlx_agent.gateway.anthropic.request import AnthropicRequest
from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.openai.passthrough import window_fields
from mlx_agent.gateway.request import prepare
from tests.unit.request_bodies import model as request_model

pytestmark = pytest.mark.fast

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather in a city.",
    "cache_control": {"type": "ephemeral"},
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def ask(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """Return a Messages request body (a user "Hi" when no messages are given)."""
    return {
        "model": "org/tiny",
        "max_tokens": 64,
        "messages": list(messages) or [{"role": "user", "content": "Hi"}],
        **fields,
    }


def translate(body: dict[str, Any], *, counting: bool = False) -> AnthropicRequest:
    """Return the translation of ``body`` after its declaration parsed it, as the front's endpoint does."""
    return request.translate(parse(PromptBody if counting else MessagesBody, body))


def to_chat(body: dict[str, Any], *, counting: bool = False) -> dict[str, Any]:
    """Return the worker's chat body for ``body`` (``translate``'s chat part)."""
    return translate(body, counting=counting).chat


def refused(body: Any, **kwargs: Any) -> RequestRefused:
    """Return the refusal the declaration or the translator gives ``body``."""
    with pytest.raises(RequestRefused) as info:
        to_chat(body, **kwargs)
    return info.value


def sequence_ids() -> Any:
    """Return an id maker that counts: ``msg_1``, ``toolu_2``, ..."""
    counter = iter(range(1, 1000))
    return lambda prefix: f"{prefix}_{next(counter)}"


def test_golden_body_of_a_tool_round_trip() -> None:
    """System blocks, text, tool_use and tool_result, tools and every sampling field translate as documented."""
    body = ask(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather?", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "In Paris."},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "20 C"}]},
                {"type": "text", "text": "Thanks."},
            ],
        },
        system=[{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer in English."}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "auto"},
        temperature=0.5,
        top_p=0.9,
        top_k=40,
        stop_sequences=["END"],
        stream=True,
        metadata={"user_id": "u-1"},
        cache_control={"type": "ephemeral"},
    )
    assert to_chat(body) == {
        "model": "org/tiny",
        "max_tokens": 64,
        "messages": [
            {"role": "system", "content": "You are terse.\n\nAnswer in English."},
            {"role": "user", "content": "Weather?\n\nIn Paris."},
            {
                "role": "assistant",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "20 C"},
            {"role": "user", "content": "Thanks."},
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
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "stop": ["END"],
        "stream": True,
    }


def test_the_worker_gets_default_model_the_ceiling_and_a_usage_chunk() -> None:
    """The translated body goes through the front's own checks: model name, the planned ceiling, usage chunk."""
    prepared = prepare(
        to_chat(ask(max_tokens=5000, stream=True)),
        model=request_model(max_tokens=256, max_tokens_ceiling=1024),
        force_usage=True,
    )
    assert prepared.body["model"] == "default_model"
    assert prepared.body["max_tokens"] == 1024
    assert prepared.body["stream_options"] == {"include_usage": True}
    assert prepared.client_model == "org/tiny"


def test_a_string_system_and_string_content_pass_as_they_are() -> None:
    """The simplest request is one user message, with a string system prompt first."""
    assert to_chat(ask(system="Be brief."))["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]


def test_tool_choice_none_sends_no_tools() -> None:
    """With tool_choice none the tools stay with the client; history with tool calls is still sent."""
    chat = to_chat(ask(tools=[WEATHER_TOOL], tool_choice={"type": "none"}))
    assert "tools" not in chat and "tool_choice" not in chat


def test_disable_parallel_tool_use_asks_the_worker_for_one_call() -> None:
    """disable_parallel_tool_use becomes parallel_tool_calls false, which the worker honours (first call only)."""
    chat = to_chat(ask(tools=[WEATHER_TOOL], tool_choice={"type": "auto", "disable_parallel_tool_use": True}))
    assert chat["parallel_tool_calls"] is False and chat["tools"]
    assert "parallel_tool_calls" not in to_chat(ask(tools=[WEATHER_TOOL], tool_choice={"type": "auto"}))


def test_a_last_assistant_turn_is_continued() -> None:
    """A prefilled assistant turn is continued by the chat template, as Anthropic continues it."""
    chat = to_chat(ask({"role": "user", "content": "Pick"}, {"role": "assistant", "content": "The answer is ("}))
    assert chat["chat_template_kwargs"] == {"continue_final_message": True, "add_generation_prompt": False}
    assert chat["messages"][-1] == {"role": "assistant", "content": "The answer is ("}


def test_thinking_settings_map_to_the_runtime() -> None:
    """Thinking enabled sets reasoning_budget, disabled turns the template's thinking off, adaptive changes nothing."""
    assert to_chat(ask(thinking={"type": "enabled", "budget_tokens": 2048}))["reasoning_budget"] == 2048
    assert to_chat(ask(thinking={"type": "disabled"}))["chat_template_kwargs"] == {"enable_thinking": False}
    adaptive = to_chat(ask(thinking={"type": "adaptive"}))
    assert "reasoning_budget" not in adaptive and "chat_template_kwargs" not in adaptive


@pytest.mark.parametrize("display", ["summarized", "updates", "highlights", "a-display-from-2027"])
def test_a_thinking_display_other_than_omitted_is_accepted_and_keeps_the_text(display: str) -> None:
    """Claude Code's adaptive thinking with display updates (or any display) translates and keeps thinking text."""
    translated = translate(ask(thinking={"type": "adaptive", "display": display}, max_tokens=32000))
    assert not translated.omit_thinking
    assert "reasoning_budget" not in translated.chat and "chat_template_kwargs" not in translated.chat


def test_omitted_display_still_omits_with_adaptive_thinking() -> None:
    """Display omitted keeps hiding thinking text whatever the thinking type."""
    assert translate(ask(thinking={"type": "adaptive", "display": "omitted"})).omit_thinking


def test_count_tokens_bodies_have_no_sampling_fields() -> None:
    """A count_tokens request translates without max_tokens and refuses sampling fields."""
    chat = to_chat(
        {"model": "org/tiny", "messages": [{"role": "user", "content": "Hi"}], "system": "S", "tools": [WEATHER_TOOL]},
        counting=True,
    )
    assert set(chat) == {"model", "messages", "tools"}
    assert (
        refused(
            {"model": "org/tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}, counting=True
        ).param
        == "max_tokens"
    )


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hello"}}


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (ask({"role": "user", "content": [IMAGE]}), "messages.0.content.0.source.data", "image_invalid"),
        (ask({"role": "user", "content": [DOCUMENT]}), "messages.0.content.0", "unsupported_content"),
        (
            ask({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [DOCUMENT]}]}),
            "messages.0.content.0.content.0",
            "unsupported_content",
        ),
        (ask(tools=[WEATHER_TOOL], tool_choice={"type": "any"}), "tool_choice", "unsupported_tool_choice"),
        (
            ask(tools=[WEATHER_TOOL], tool_choice={"type": "tool", "name": "get_weather"}),
            "tool_choice",
            "unsupported_tool_choice",
        ),
        (
            ask(mcp_servers=[{"type": "url", "url": "https://example.com", "name": "x"}]),
            "mcp_servers",
            "unsupported_parameter",
        ),
        (
            ask(thinking={"type": "enabled", "budget_tokens": 1024, "display": ["shown"]}),
            "thinking.display",
            "invalid_type",
        ),
        (ask(tools=[{"type": "computer_20250124", "name": "computer"}]), "tools.0.type", "unsupported_tool"),
        (ask(container="c-1"), "container", "unsupported_parameter"),
        (ask(output_config={"task_budget": 5}), "output_config.task_budget", "unsupported_parameter"),
        (ask(output_config={"format": {"type": "xml"}}), "output_config.format", "invalid_value"),
        (ask({"role": "tool", "content": "x"}), "messages.0.role", "invalid_value"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model", "invalid_value"),
        ({"model": "org/tiny", "messages": [{"role": "user", "content": "x"}]}, "max_tokens", "invalid_value"),
    ],
)
def test_what_the_runtime_cannot_honour_is_refused(body: dict[str, Any], param: str, code: str) -> None:
    """Each refusal is a 400 invalid_request_error naming the offending field."""
    refusal = refused(body)
    assert (refusal.status, refusal.type_, refusal.param, refusal.code) == (400, "invalid_request_error", param, code)


# How the pinned Claude Code (2.1.332) recognises a refusal of its safeguards field by the error's message.
CLAUDE_CODE_READS = re.compile(r"^(?:body\.)?safeguards(?:\.\w+)*:")


def test_auto_modes_safeguards_are_refused_in_the_words_claude_code_reads() -> None:
    """``safeguards`` (auto mode's check) is unsupported_parameter whose message starts ``safeguards:``, as counted too.

    Claude Code matches that start (``CLAUDE_CODE_READS``, its own regex) to send the request again without the
    field and the beta header, and to keep both off for the session.
    """
    asked = [{"type": "dangerous_tool_use", "classifier_context": {"v": 1, "permission_mode": "auto", "rules": {}}}]
    counted = {k: v for k, v in ask(safeguards=asked).items() if k != "max_tokens"}
    for body, counting in ((ask(safeguards=asked), False), (counted, True)):
        with pytest.raises(RequestRefused) as caught:
            translate(body, counting=counting)
        refusal = caught.value
        assert (refusal.status, refusal.param, refusal.code) == (400, "safeguards", "unsupported_parameter")
        assert CLAUDE_CODE_READS.match(str(refusal)), str(refusal)
    assert translate(ask(safeguards=None)).chat["messages"] == [{"role": "user", "content": "Hi"}]


def test_what_claude_code_sends_is_accepted() -> None:
    """Claude Code's fields are honoured or accepted: billing block dropped, thinking omitted, system in place."""
    translated = translate(
        ask(
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": [{"type": "text", "text": "Be careful."}]},
            system=[
                {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332; cch=ab12;"},
                {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
            ],
            tools=[{**WEATHER_TOOL, "strict": True, "defer_loading": True, "eager_input_streaming": True}],
            thinking={"type": "enabled", "budget_tokens": 31999, "display": "omitted"},
            context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            output_config={"effort": "high"},
            metadata={"user_id": "{}"},
            service_tier="auto",
            max_tokens=32000,
            stream=True,
        )
    )
    chat = translated.chat
    assert chat["messages"] == [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Hi"},
        {"role": "system", "content": "Be careful."},
    ]
    assert (chat["reasoning_budget"], chat["reasoning_effort"], chat["max_tokens"]) == (31999, "high", 32000)
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather"]
    assert translated.omit_thinking and translated.tools.dropped == []


def test_server_tools_are_left_out_and_client_tools_get_their_schema() -> None:
    """Server tools (web search, code execution) are dropped and listed; bash and the text editor are offered."""
    translated = translate(
        ask(
            tools=[
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
                {"type": "code_execution_20250522", "name": "code_execution"},
                {"type": "bash_20250124", "name": "bash"},
                {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
                WEATHER_TOOL,
            ]
        )
    )
    assert translated.tools.dropped == ["web_search", "code_execution"]
    offered = {t["function"]["name"]: t["function"]["parameters"] for t in translated.chat["tools"]}
    assert set(offered) == {"bash", "str_replace_based_edit_tool", "get_weather"}
    assert offered["bash"]["properties"]["command"] == {"type": "string"}


def test_output_format_becomes_an_enforced_response_format() -> None:
    """output_config.format with a JSON schema reaches the worker as response_format, which it enforces."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    chat = to_chat(ask(output_config={"format": {"type": "json_schema", "schema": schema}}))
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


def test_omitted_thinking_keeps_the_block_without_its_text() -> None:
    """With display omitted the reply still has a thinking block, with an empty thinking text."""
    doc = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "A", "reasoning": "secret"}}]}
    blocks = message_from_chat(doc, "m", sequence_ids(), omit_thinking=True)["content"]
    assert blocks[0] == {"type": "thinking", "thinking": "", "signature": ""} and blocks[1]["text"] == "A"


def test_a_trailing_tool_use_is_refused() -> None:
    """An assistant tool_use cannot be continued: its result must come first."""
    body = ask(
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
    )
    assert refused(body).param == "messages"


def test_golden_reply_with_thinking_text_and_a_tool_call() -> None:
    """A worker reply becomes thinking, text and tool_use blocks, stop_reason tool_use, Anthropic usage."""
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
                        },
                        {"type": "function", "function": {"name": "get_time", "arguments": "{}"}},
                    ],
                },
            }
        ],
        "usage": {
            "prompt_tokens": 30,
            "completion_tokens": 7,
            "total_tokens": 37,
            "prompt_tokens_details": {"cached_tokens": 12},
        },
    }
    assert message_from_chat(doc, "org/tiny", sequence_ids()) == {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "org/tiny",
        "content": [
            {"type": "thinking", "thinking": "Need the weather.", "signature": ""},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call-9", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 18,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 12,
            "output_tokens": 7,
        },
    }


@pytest.mark.parametrize(("finish", "reason"), [("stop", "end_turn"), ("length", "max_tokens"), (None, "end_turn")])
def test_finish_reasons_map_to_stop_reasons(finish: str | None, reason: str) -> None:
    """A stop is end_turn, length is max_tokens; stop_sequence stays null (the runtime does not say which)."""
    doc = {"choices": [{"finish_reason": finish, "message": {"content": "x"}}], "usage": {}}
    message = message_from_chat(doc, "m")
    assert (message["stop_reason"], message["stop_sequence"]) == (reason, None)


def test_arguments_that_are_not_an_object_stay_text() -> None:
    """A tool call whose arguments are not a JSON object is returned as text, not as a broken tool_use."""
    doc = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "content": None,
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1, 2"}}],
                },
            }
        ]
    }
    message = message_from_chat(doc, "m")
    assert [b["type"] for b in message["content"]] == ["text"] and message["stop_reason"] == "end_turn"


def test_usage_without_worker_counts_is_zero() -> None:
    """Missing counts are zeros, and cached tokens never exceed the prompt."""
    assert usage_of(None) == {
        "input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }
    assert usage_of({"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 9}})["input_tokens"] == 0


def test_the_messages_declaration_accepts_any_display_and_bounds_the_budget() -> None:
    """The front's body check passes display updates and refuses a zero budget or a non-string display."""
    check(MessagesBody, ask(thinking={"type": "adaptive", "display": "updates"}))
    with pytest.raises(BodyInvalid) as zero:
        check(MessagesBody, ask(thinking={"type": "enabled", "budget_tokens": 0}))
    with pytest.raises(BodyInvalid) as number:
        check(MessagesBody, ask(thinking={"type": "adaptive", "display": 1}))
    assert (zero.value.param, number.value.param) == ("thinking.budget_tokens", "thinking.display")
    assert number.value.code == "invalid_type"


@pytest.mark.parametrize(
    ("window", "ceiling", "openai_fields", "anthropic_fields"),
    [
        (32768, 4096, {"context_length": 32768, "max_model_len": 32768, "max_output_tokens": 4096}, (32768, 4096)),
        (8192, None, {"context_length": 8192, "max_model_len": 8192, "max_output_tokens": 8192}, (8192, 8192)),
        (8192, 100000, {"context_length": 8192, "max_model_len": 8192, "max_output_tokens": 8192}, (8192, 8192)),
        (None, 512, {"max_output_tokens": 512}, (None, 512)),
        (None, None, {}, (None, None)),
    ],
)
def test_a_listing_entry_carries_the_window_and_ceiling_it_knows(
    window: int | None,
    ceiling: int | None,
    openai_fields: dict[str, int],
    anthropic_fields: tuple[int | None, int | None],
) -> None:
    """The window is the longest prompt, the ceiling (held to the window) the longest reply; unknowns are left out."""
    model = {"context_window": window, "max_tokens_ceiling": ceiling}
    assert window_fields(model, anthropic=False) == openai_fields
    both = window_fields(model, anthropic=True)
    assert (both.get("max_input_tokens"), both.get("max_tokens")) == anthropic_fields
    assert is_pattern("claude-*") and is_pattern("gpt-[45]") and not is_pattern("claude-local")
