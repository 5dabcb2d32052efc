"""An append-only conversation renders to a prompt that only grows, on every template the suite ships (pure).

Turn N+1's rendered prompt must start with turn N's (without its generation prompt, which the reply replaces)
for the worker's prompt cache to serve all of turn N. Checked as a property over conversations (hypothesis)
through the worker's system-message placement (``runtime/serving/system_turns``), for chat bodies and for the bodies
the Anthropic and Responses translators make of Claude Code- and Codex-shaped sessions: on the hand-written
templates below, and on every real template of the corpus (``tests/template_corpus.py``) that has no listed limit,
through the worker's whole path (``prepare_body``'s adapter, the request's tools, the generation prompt). The
templates with limits are checked turn by turn in ``test_template_sessions.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlx_agent.runtime.serving.system_turns import MARKER, SystemTurns, place
from tests.agent_sessions import CHAT_TOOLS, assert_served_grows
from tests.gateway_support import translate_messages, translate_responses
from tests.prompt_templates import RENDERS, TEMPLATES, assert_grows, rendered
from tests.template_corpus import corpus, known_limits

pytestmark = pytest.mark.fast

TEXT_TEMPLATES = [name for name in TEMPLATES if name != "vlm"]
REAL_TEMPLATES = [t.name for t in corpus() if not known_limits(t.name)]  # real ones, as shipped
# Fewer examples per real template: there are many, and each renders its tools every turn.
REAL = settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
USER_FIRST: Any = {"role": "user", "content": "Hello."}
PROPERTY = settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
words = st.text(alphabet="abcdefghij klmnop", min_size=1, max_size=12).map(lambda t: t.strip() or "x")

# A round after the model's turn: (the reply is a tool call?, where a late system message goes: none, before the
# next user message or tool result, or after it).
rounds = st.lists(st.tuples(st.booleans(), st.sampled_from(["none", "before", "after"]), words), max_size=5)


def conversation_turns(template: str, first_reminder: bool, plan: list[tuple[bool, str, str]]) -> list[list[Any]]:
    """Return the requests of an append-only session: each one the previous plus the reply and what followed."""
    tools = template != "alternating"  # a template that insists on alternating roles knows no tool results
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Go."}]
    if first_reminder:
        messages.append({"role": "system", "content": "Reminder 0."})
    turns = [list(messages)]
    for number, (calls, reminder, text) in enumerate(plan, 1):
        late = {"role": "system", "content": f"Reminder {number}: {text}."}
        if calls and tools:
            call = {
                "id": f"call_{number}",
                "type": "function",
                "function": {"name": "read", "arguments": {"n": number}},
            }
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            follow = {"role": "tool", "tool_call_id": f"call_{number}", "content": f"Result {number}: {text}."}
        else:
            messages.append({"role": "assistant", "content": f"Answer {number}."})
            follow = {"role": "user", "content": f"Next {number}: {text}."}
        if template == "alternating" and reminder == "before":
            reminder = "after"  # after an assistant turn and before a user one, nothing alternates
        messages += [late, follow] if reminder == "before" else [follow, late] if reminder == "after" else [follow]
        turns.append(list(messages))
    return turns


@pytest.mark.parametrize("name", TEXT_TEMPLATES)
@PROPERTY
@given(first=st.booleans(), plan=rounds)
def test_an_append_only_conversation_renders_a_growing_prompt(name: str, first: bool, plan: Any) -> None:
    """On every template, each turn's rendered prompt starts with the previous turn's, late reminders included."""
    assert_grows(name, conversation_turns(name, first, plan))


@pytest.mark.parametrize("name", REAL_TEMPLATES)
@REAL
@given(first=st.booleans(), plan=rounds)
def test_an_append_only_conversation_grows_on_real_templates(name: str, first: bool, plan: Any) -> None:
    """On every real template without a listed limit, through the worker's path with tools, each prompt grows."""
    turns = conversation_turns("chatml", first, plan)
    assert_served_grows(name, [{"model": "default_model", "messages": m, "tools": CHAT_TOOLS} for m in turns])


@pytest.mark.parametrize(
    ("name", "ways"),
    [
        ("chatml", {"user": "keep", "assistant": "keep", "tool": "keep"}),
        ("qwen3", {"user": "keep", "assistant": "keep", "tool": "keep"}),
        ("llama3", {"user": "keep", "assistant": "keep", "tool": "keep"}),
        ("harmony", {"user": "keep", "assistant": "keep", "tool": "keep"}),
        ("raising", {"user": "user", "assistant": "user", "tool": "user"}),
        ("dropping", {"user": "user", "assistant": "user", "tool": "user"}),
        ("alternating", {"user": "merge", "assistant": "user"}),
    ],
)
def test_the_way_is_decided_by_rendering_the_template(name: str, ways: dict[str, str]) -> None:
    """A template that renders a late system message keeps it; one that raises or drops it gets a marked user turn."""
    turns = SystemTurns(RENDERS[name])
    assert {before: turns.way(before) for before in ways} == ways


def test_a_template_refusing_every_way_gets_the_reminder_joined_to_the_first_message() -> None:
    """Where no way renders the reminder after the first message, it joins the first system message (as before)."""
    plain = RENDERS["chatml"]

    def refusing(messages: list[dict[str, Any]], generation: bool) -> str:
        if any("reminder" in str(m.get("content")).lower() for m in messages[1:]):
            raise ValueError("only the first message may remind")
        return str(plain(messages, generation))

    turns = SystemTurns(refusing)
    assert turns.way("tool") == "front"
    placed = turns.place([USER_FIRST, {"role": "system", "content": "Reminder."}, {"role": "user", "content": "Go."}])
    assert placed == [{"role": "system", "content": "Reminder."}, USER_FIRST, {"role": "user", "content": "Go."}]
    assert place(
        [{"role": "system", "content": "Rules."}, USER_FIRST, {"role": "system", "content": "R."}], lambda _: "front"
    ) == [
        {"role": "system", "content": "Rules.\n\nR."},
        USER_FIRST,
    ]


def test_a_late_system_message_is_rendered_at_its_place() -> None:
    """A reminder after a tool result stays after it: kept as a system turn, or marked text where that is refused."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "read", "arguments": {}}}]},
        {"role": "tool", "content": "Result."},
        {"role": "system", "content": "Reminder."},
    ]
    for name in ("chatml", "qwen3", "llama3", "harmony", "raising", "dropping"):
        prompt = rendered(name, messages, generation=True)
        assert prompt.index("Rules.") < prompt.index("Result.") < prompt.index("Reminder."), (name, prompt)
    assert f"<|im_start|>user\n{MARKER}\nReminder.<|im_end|>" in rendered("raising", messages)
    assert "<|im_start|>system\nReminder.<|im_end|>" in rendered("chatml", messages)


def test_a_merged_reminder_keeps_the_image_parts_of_the_message_before() -> None:
    """Merged into a user message with an image, the reminder is one more text part after the image."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]},
        {"role": "system", "content": "Reminder."},
    ]
    merged = place(messages, lambda _: "merge")
    assert merged == [
        {
            "role": "user",
            "content": [
                image,
                {"type": "text", "text": "What is this?"},
                {"type": "text", "text": f"\n\n{MARKER}\nReminder."},
            ],
        }
    ]


@PROPERTY
@given(plan=rounds)
def test_a_conversation_with_images_grows_on_the_vlm_template(plan: Any) -> None:
    """With image parts in user turns (mlx-vlm's ChatML), each turn's prompt starts with the previous one's."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    turns = conversation_turns("vlm", True, plan)
    for messages in turns:
        messages[1] = {"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}
    assert_grows("vlm", turns)
    assert rendered("vlm", turns[-1]).count("<|image_pad|>") == 1


# -- through the translators, shaped like the agents' own requests ------------------------------------------


def claude_code_bodies(plan: list[tuple[bool, str, str]]) -> list[dict[str, Any]]:
    """Return the Messages bodies of a Claude Code-shaped session (billing nonce, reminders, thinking, tools)."""
    reminder = {"type": "text", "text": "<system-reminder>\nThe date is today.\n</system-reminder>"}
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [reminder, {"type": "text", "text": "Fix the test.", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    bodies = []
    for number, (calls, late, text) in enumerate([*plan, (False, "none", "end")], 1):
        bodies.append(
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 32000,
                "system": [
                    {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.332; cch={number:08x};"},
                    {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
                    {"type": "text", "text": "Work carefully. " * 20, "cache_control": {"type": "ephemeral"}},
                ],
                "tools": [{"name": "Read", "description": "Read a file.", "input_schema": {"type": "object"}}],
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "metadata": {"user_id": "user_1"},
                "messages": [dict(m) for m in messages],
            }
        )
        thinking = {"type": "thinking", "thinking": f"Thought {number}.", "signature": "sig"}
        if calls:
            use = {"type": "tool_use", "id": f"toolu_{number}", "name": "Read", "input": {"file_path": text}}
            messages.append({"role": "assistant", "content": [thinking, {"type": "text", "text": "Reading."}, use]})
            result = {
                "type": "tool_result",
                "tool_use_id": f"toolu_{number}",
                "content": [{"type": "text", "text": text}],
            }
            countdown = {"type": "text", "text": f"<system-reminder>Tokens left: {1000 - number}</system-reminder>"}
            messages.append({"role": "user", "content": [result, countdown]})
        else:
            messages.append({"role": "assistant", "content": [thinking, {"type": "text", "text": f"Done {number}."}]})
            messages.append({"role": "user", "content": f"Next: {text}"})
        if late != "none":  # Claude Code's own system turns inside messages
            messages.append({"role": "system", "content": f"Note {number}: {text}"})
    return bodies


def codex_bodies(plan: list[tuple[bool, str, str]]) -> list[dict[str, Any]]:
    """Return the Responses bodies of a Codex-shaped session (developer items, reasoning, function calls)."""
    items: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "<permissions>all</permissions>"}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context/>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the test."}]},
    ]
    bodies = []
    for number, (calls, late, text) in enumerate([*plan, (False, "none", "end")], 1):
        bodies.append(
            {
                "model": "gpt-5-codex",
                "instructions": "You are Codex. " * 20,
                "input": [dict(item) for item in items],
                "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}],
                "reasoning": {"effort": "high", "summary": "auto"},
                "store": False,
                "stream": True,
                "prompt_cache_key": "session-1",
            }
        )
        items.append({"type": "reasoning", "summary": [], "encrypted_content": f"opaque-{number}"})
        if calls:
            items.append({"type": "function_call", "call_id": f"c{number}", "name": "exec_command", "arguments": "{}"})
            items.append({"type": "function_call_output", "call_id": f"c{number}", "output": text})
        else:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": f"Done {number}."}],
                }
            )
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        if late != "none":
            items.append(
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": f"Note {number}."}]}
            )
    return bodies


@pytest.mark.parametrize("name", ["chatml", "qwen3", "llama3", "raising", "harmony"])
@PROPERTY
@given(plan=rounds)
def test_a_claude_code_session_renders_a_growing_prompt(name: str, plan: Any) -> None:
    """Translated as the front does, a Claude Code session's prompts grow (nonce, thinking and reminders included)."""
    assert_grows(name, [translate_messages(body).chat["messages"] for body in claude_code_bodies(plan)])


@pytest.mark.parametrize("name", ["chatml", "qwen3", "llama3", "raising", "harmony"])
@PROPERTY
@given(plan=rounds)
def test_a_codex_session_renders_a_growing_prompt(name: str, plan: Any) -> None:
    """Translated as the front does, a Codex session's prompts grow (developer items and reasoning included)."""
    assert_grows(
        name, [translate_responses(body, default_model="gpt-5-codex").chat["messages"] for body in codex_bodies(plan)]
    )


@pytest.mark.parametrize("name", REAL_TEMPLATES)
@REAL
@given(plan=rounds)
def test_a_claude_code_session_grows_on_real_templates(name: str, plan: Any) -> None:
    """A translated Claude Code session's prompts grow on every real template without a listed limit."""
    assert_served_grows(name, [translate_messages(body).chat for body in claude_code_bodies(plan)])


@pytest.mark.parametrize("name", REAL_TEMPLATES)
@REAL
@given(plan=rounds)
def test_a_codex_session_grows_on_real_templates(name: str, plan: Any) -> None:
    """A translated Codex session's prompts grow on every real template without a listed limit."""
    assert_served_grows(
        name, [translate_responses(body, default_model="gpt-5-codex").chat for body in codex_bodies(plan)]
    )


def test_thinking_blocks_leave_the_earlier_prompt_as_it_was() -> None:
    """An assistant turn's thinking is dropped by the translator, so the next prompt starts with the previous one."""
    first, second = claude_code_bodies([(True, "none", "a.py")])
    chat = translate_messages(second).chat["messages"]
    assert "Thought 1." not in rendered("qwen3", chat)
    assert rendered("qwen3", chat).startswith(rendered("qwen3", translate_messages(first).chat["messages"]))


def test_folding_a_late_system_message_to_the_front_would_break_the_prefix() -> None:
    """The old behaviour, for contrast: joining a reminder into the first message rewrites the prompt's start."""
    turn_one: list[dict[str, Any]] = [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Go."}]
    turn_two = [*turn_one, {"role": "assistant", "content": "Ok."}, {"role": "system", "content": "Reminder."}]
    folded = [{"role": "system", "content": "Rules.\n\nReminder."}, *turn_two[1:3]]
    render = RENDERS["chatml"]
    assert not render(folded, False).startswith(render(turn_one, False))
    assert rendered("chatml", turn_two).startswith(rendered("chatml", turn_one))
