"""Request bodies as the wrapper prepares them for mlx_lm (pure: no server)."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_agent.errors import HttpError
from mlx_agent.runtime.serving.limits import Limits
from mlx_agent.runtime.serving.request_options import Served, prepare_body

pytestmark = pytest.mark.fast

SERVED = Served(frozenset({"default_model", "/models/tiny"}), Limits())
USER = {"role": "user", "content": "hi"}


def prepare(**body: Any) -> tuple[dict[str, Any], Any]:
    """Prepare a chat body with one user message unless told otherwise."""
    return prepare_body({"messages": [USER], **body}, SERVED, chat=True)


def refused(**body: Any) -> HttpError:
    """Return the error a chat body is refused with."""
    with pytest.raises(HttpError) as caught:
        prepare(**body)
    return caught.value


def test_leading_system_messages_fold_and_later_ones_stay_at_their_place() -> None:
    """The leading system and developer messages join into one, in order; a later one keeps its place."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "A"},
        {"role": "developer", "content": [{"type": "text", "text": "B"}]},
        USER,
        {"role": "assistant", "content": "x"},
        {"role": "developer", "content": "C"},
    ]
    body, _ = prepare(messages=messages)
    assert body["messages"] == [
        {"role": "system", "content": "A\n\nB"},
        USER,
        {"role": "assistant", "content": "x"},
        {"role": "system", "content": "C"},
    ]


def test_one_leading_system_message_is_left_as_it_is() -> None:
    """A conversation templates already accept is not rewritten (content parts stay parts)."""
    system = {"role": "system", "content": [{"type": "text", "text": "A"}]}
    body, _ = prepare(messages=[system, USER])
    assert body["messages"] == [system, USER]


def test_reasoning_effort_goes_to_the_template_unless_named_there() -> None:
    """A top-level reasoning_effort becomes a template kwarg; an explicit kwarg wins."""
    assert prepare(reasoning_effort="high")[0]["chat_template_kwargs"] == {"reasoning_effort": "high"}
    body, _ = prepare(reasoning_effort="high", chat_template_kwargs={"reasoning_effort": "low"})
    assert body["chat_template_kwargs"] == {"reasoning_effort": "low"}


def test_template_switches_leave_the_kwargs_for_the_options() -> None:
    """add_generation_prompt and continue_final_message are the wrapper's; mlx_lm never sees them."""
    body, options = prepare_body(
        {
            "messages": [USER, {"role": "assistant", "content": "The"}],
            "chat_template_kwargs": {"continue_final_message": True, "enable_thinking": False},
        },
        SERVED,
        chat=True,
    )
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert (options.add_generation_prompt, options.continue_final_message) == (False, True)
    assert prepare(chat_template_kwargs={"add_generation_prompt": False})[1].custom_template_call


def test_continuing_needs_an_assistant_message_last() -> None:
    """continue_final_message after a user message is a 400, not a template crash."""
    assert refused(chat_template_kwargs={"continue_final_message": True}).param == "chat_template_kwargs"


def test_an_unknown_model_is_404_and_a_known_name_passes() -> None:
    """Only default_model and the served model's names are accepted."""
    assert refused(model="other").status == 404
    assert prepare(model="/models/tiny")[0]["model"] == "/models/tiny"


@pytest.mark.parametrize(
    "field,value",
    [
        ("adapters", "/a"),
        ("draft_model", "/d"),
        ("tools", {}),
        ("tool_choice", "never"),
        ("response_format", "json"),
        ("chat_template_kwargs", []),
        ("reasoning_effort", ""),
    ],
)
def test_a_bad_field_is_a_400_naming_it(field: str, value: Any) -> None:
    """Fields the wrapper reads are checked before mlx_lm sees the body."""
    error = refused(**{field: value})
    assert (error.status, error.param) == (400, field)


def test_tools_leave_the_format_unenforced_unless_ruled_out() -> None:
    """response_format is compiled, but not enforced while a tool call is possible."""
    tools = [{"type": "function", "function": {"name": "f"}}]
    json_object = {"type": "json_object"}
    assert prepare(response_format=json_object)[1].grammar is not None
    assert prepare(response_format=json_object, tools=tools)[1].grammar is None
    assert prepare(response_format=json_object, tools=tools, tool_choice="none")[1].grammar is not None


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "f"}}])
def test_a_forced_tool_call_is_refused_naming_tool_choice(choice: Any) -> None:
    """The runtime cannot force a call, so 'required' or a named tool is a 400, never a silent plain answer."""
    error = refused(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice=choice)
    assert (error.status, error.param, error.code) == (400, "tool_choice", "unsupported_tool_choice")


def test_tool_choice_none_hides_the_tools_from_the_model() -> None:
    """With tool_choice 'none' the template gets no tools, so the model cannot call one."""
    body, _ = prepare(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="none")
    assert "tools" not in body and body["tool_choice"] == "none"


def test_a_text_completion_needs_a_string_prompt() -> None:
    """/v1/completions bodies are checked for a prompt instead of messages."""
    with pytest.raises(HttpError) as caught:
        prepare_body({"prompt": ["a"]}, SERVED, chat=False)
    assert caught.value.param == "prompt"
