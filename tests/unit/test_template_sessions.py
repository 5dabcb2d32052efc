"""Agent sessions on every real chat template render a prompt that only grows, or a clear 400 (pure, in-process).

Each session (``tests/agent_sessions.py``: Claude Code, Codex and opencode shapes, ten turns) goes through the
worker's path: ``prepare_body`` adapts the conversation (``runtime/serving/conversation``), then the template
renders it with the request's tools and the generation prompt. Turn N+1's prompt must start with turn N's cut:
the longest common prefix of turn N's rendering with and without the generation prompt (the reply's own turn
replaces the generation prompt, and Phi-style templates end a turn differently without it, so neither rendering
alone is what the next turn repeats). What a template cannot do as shipped is listed below with its reason, and
asserted to happen exactly so: the lists cannot silently grow.
"""

from __future__ import annotations

import itertools
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlx_agent.runtime.serving.conversation import (
    REMEDY,
    Adapter,
    Conversations,
    for_provider,
    short_id,
    single_calls,
)
from mlx_agent.runtime.serving.system_turns import MARKER
from tests.agent_sessions import (
    CHAT_TOOLS,
    IMAGE_SHAPES,
    PICTURED,
    QUESTION,
    SHAPES,
    TURNS,
    VISION,
    served_prompts,
    template_render,
    vlm_served_prompts,
)
from tests.template_corpus import QUESTION_REWRITES, REFUSED, TOOL_TAIL_REWRITES, corpus, template

NAMES = [t.name for t in corpus()]
PROPERTY = settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

# The steps each template's rendering decides (the request's tools: CHAT_TOOLS), beyond the plain ones.
STEPS = {
    "meta-llama-Llama-3.1-8B-Instruct": ("single_calls",),
    "meta-llama-Llama-3.2-3B-Instruct": ("single_calls",),
    "meta-llama-Llama-3.3-70B-Instruct": ("single_calls",),
    "mistralai-Mistral-Nemo-Instruct-2407": ("system_in_user", "short_ids", "user_into_tool", "join_users"),
    "Mistral-Small-3.2-24B-Instruct-2506": ("short_ids", "user_into_tool", "join_users"),
    "google-gemma-2-2b-it": ("system_in_user", "join_users"),
    "google-gemma-3-it": ("join_users",),
}


def expected_rewrites(name: str, shape: str, bodies: list[dict[str, Any]]) -> set[int]:
    """Return the turns ``name`` rewrites by design in ``shape`` (see the tables above)."""
    if name in REFUSED:
        return set()
    turns = set()
    if shape in QUESTION_REWRITES.get(name, ()):
        turns.add(QUESTION)
    if name in TOOL_TAIL_REWRITES:
        for n in range(1, len(bodies)):
            before = bodies[n - 1]["messages"]
            calls_again = bool(bodies[n]["messages"][len(before)].get("tool_calls"))
            if before[-1]["role"] == "tool" and (calls_again or not TOOL_TAIL_REWRITES[name]):
                turns.add(n)
    return turns


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("name", NAMES)
def test_every_turn_grows_or_answers_a_clear_400(name: str, shape: str) -> None:
    """Each turn's prompt starts with the previous turn's cut, except the listed rewrites and refusals."""
    bodies = SHAPES[shape]()
    prompts = served_prompts(template(name), bodies)
    refused = {n: p.error for n, p in enumerate(prompts) if p.error is not None}
    rewrites = {
        n
        for n in range(1, len(prompts))
        if n not in refused and n - 1 not in refused and not prompts[n].prompt.startswith(prompts[n - 1].cut)
    }
    assert rewrites == expected_rewrites(name, shape, bodies)
    if name not in REFUSED:
        assert not refused, {n: e.message for n, e in refused.items()}
        return
    assert set(refused) == set(range(1, TURNS))  # the first turn (no tool call yet) renders
    for error in refused.values():
        assert (error.status, error.code) == (400, "template_error")
        assert REFUSED[name] in error.message and "--chat-template FILE" in error.message


@pytest.mark.parametrize("name", NAMES)
def test_the_steps_are_decided_by_rendering(name: str) -> None:
    """Each template gets exactly the steps its rendering needs (ids, single calls, alternation, system role)."""
    assert Adapter(template_render(template(name)), CHAT_TOOLS).steps == STEPS.get(name, ())


@pytest.mark.fast
def test_sessions_are_append_only_and_long() -> None:
    """Every session has at least eight turns, each request the previous one plus what followed it."""
    for build in SHAPES.values():
        bodies = build()
        assert len(bodies) >= 8
        for before, after in itertools.pairwise(bodies):
            assert after["messages"][: len(before["messages"])] == before["messages"]
            assert after["tools"] == before["tools"]


def test_hermes_probes_render_with_the_requests_tools() -> None:
    """Hermes loops over tools unguarded: probed with the request's tools, a late message stays in place."""
    adapter = Adapter(template_render(template("NousResearch-Hermes-3-Llama-3.1-8B-tool_use")), CHAT_TOOLS)
    assert {before: adapter.turns.way(before) for before in ("user", "assistant", "tool")} == dict.fromkeys(
        ("user", "assistant", "tool"), "keep"
    )


def test_phi_without_a_generation_prompt_keeps_late_messages_in_place() -> None:
    """Phi-4-mini appends eos_token without a generation prompt; the probes render as serving does, so it keeps."""
    adapter = Adapter(template_render(template("microsoft-Phi-4-mini-instruct")), CHAT_TOOLS)
    assert adapter.turns.way("tool") == "keep"


def test_a_late_developer_message_leaves_qwen35s_last_query_alone() -> None:
    """On Qwen3.5 a late message after tool results joins the last result, so earlier turns keep their thinking."""
    adapter = Adapter(template_render(template("Qwen3.5-4B")), CHAT_TOOLS)
    assert adapter.turns.way("tool") == "merge"
    bodies = SHAPES["codex"]()
    late = next(n for n, b in enumerate(bodies) if b["messages"][-1]["role"] == "system")
    prompts = served_prompts(template("Qwen3.5-4B"), bodies)
    assert prompts[late].prompt.startswith(prompts[late - 1].cut)
    assert f"{MARKER}\n<turn_context>" in prompts[late].prompt.split("<tool_response>")[-1]


def test_a_gemma2_system_message_joins_the_first_user_turn() -> None:
    """Gemma 2 has no system role: the system message opens the first user turn instead of failing the request."""
    gemma = template("google-gemma-2-2b-it")
    body = {
        "model": "default_model",
        "messages": [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Hi."}],
    }
    (prompt,) = served_prompts(gemma, [body])
    assert prompt.error is None
    assert "<start_of_turn>user\nRules.\n\nHi.<end_of_turn>" in prompt.prompt


def test_mistral_ids_map_the_same_way_on_every_turn() -> None:
    """Claude Code's toolu_ ids become 9 letters and digits on Mistral, the same for a call on every turn."""
    mistral = template("Mistral-Small-3.2-24B-Instruct-2506")
    bodies = SHAPES["claude_code"]()
    prompts = served_prompts(mistral, bodies)
    first_id = bodies[1]["messages"][-4]["tool_calls"][0]["id"]
    assert first_id.startswith("toolu_")
    written = f"[CALL_ID]{short_id(first_id)}[ARGS]"
    assert all(written in p.prompt for p in prompts[1:])
    assert first_id not in prompts[-1].prompt


@pytest.mark.fast
@PROPERTY
@given(st.text(min_size=1, max_size=40))
def test_a_short_id_is_nine_letters_and_digits_and_stable(client_id: str) -> None:
    """Any client id maps to 9 letters and digits, the same every time; one already of that form is kept."""
    mapped = short_id(client_id)
    assert len(mapped) == 9 and all(c in string.ascii_letters + string.digits for c in mapped)
    assert short_id(client_id) == mapped and short_id(mapped) == mapped


@pytest.mark.fast
@PROPERTY
@given(st.integers(min_value=2, max_value=6), st.randoms(use_true_random=False))
def test_single_calls_keep_every_call_and_result(count: int, rng: Any) -> None:
    """Parallel calls become one-call turns, each followed by its own result, whatever order the results came in."""
    calls = [
        {"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": {"n": n}}} for n in range(count)
    ]
    results = [{"role": "tool", "tool_call_id": f"c{n}", "content": f"r{n}"} for n in range(count)]
    rng.shuffle(results)
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": "Both.", "tool_calls": calls},
        *results,
        {"role": "user", "content": "Go."},
    ]
    split = single_calls(messages)
    assert len(split) == 2 * count + 1 and split[-1] == {"role": "user", "content": "Go."}
    for n in range(count):
        turn, result = split[2 * n], split[2 * n + 1]
        assert turn["tool_calls"] == [calls[n]] and turn["content"] == ("Both." if n == 0 else "")
        assert result["tool_call_id"] == f"c{n}"


def test_a_refusal_names_the_templates_words_and_the_remedy() -> None:
    """A conversation the template still refuses answers 400 with the template's message and --chat-template."""
    kimi = template("Kimi-K2-Instruct")
    prompts = served_prompts(kimi, SHAPES["opencode"]()[:2])
    error = prompts[1].error
    assert error is not None and error.status == 400
    assert error.message.endswith(f"; {REMEDY}.")


def test_conversations_decide_once_per_set_of_tools() -> None:
    """The adapter for a set of tools is decided once and reused, so every turn of a session is adapted alike."""
    calls = []
    render = template_render(template("Qwen-Qwen3-0.6B"))

    def counting(messages: list[dict[str, Any]], tools: Any, generation: bool) -> str:
        calls.append(1)
        return str(render(messages, tools, generation))

    conversations = Conversations(counting)
    assert conversations.adapter(CHAT_TOOLS) is conversations.adapter([dict(t) for t in CHAT_TOOLS])
    late = [{"role": "user", "content": "Hi."}, {"role": "system", "content": "Late."}]
    decided = len(calls)
    conversations.adapt(late, CHAT_TOOLS)  # the late message's way is probed here, the first time
    probed = len(calls)
    conversations.adapt(late, CHAT_TOOLS)
    assert 0 < decided < probed == len(calls)
    assert conversations.adapter(None) is not conversations.adapter(CHAT_TOOLS)


def _hostile_messages() -> Any:
    text = st.text(max_size=8)
    part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "x"]), "text": text | st.integers()})
    content = st.none() | text | st.integers() | st.lists(part, max_size=3) | st.dictionaries(text, text, max_size=2)
    function = st.fixed_dictionaries({"name": text, "arguments": text | st.just("{}") | st.dictionaries(text, text)})
    call = st.fixed_dictionaries({"id": text | st.integers() | st.none(), "function": function}) | text
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "other"]), "content": content},
        optional={"tool_calls": st.none() | st.lists(call, max_size=3) | text, "tool_call_id": text | st.integers()},
    )
    return st.lists(message, min_size=1, max_size=6)


@pytest.mark.parametrize(
    "name", ["Mistral-Small-3.2-24B-Instruct-2506", "meta-llama-Llama-3.3-70B-Instruct", "google-gemma-2-2b-it"]
)
@PROPERTY
@given(messages=_hostile_messages())
def test_a_hostile_conversation_renders_or_answers_400(name: str, messages: list[dict[str, Any]]) -> None:
    """Whatever the messages hold, the adapter and the template give a prompt or a 400, never another error."""
    (prompt,) = served_prompts(template(name), [{"model": "default_model", "messages": messages, "tools": CHAT_TOOLS}])
    assert prompt.error is None or prompt.error.status == 400


def test_the_worker_renders_with_the_requests_tools_and_the_generation_prompt() -> None:
    """The mlx_lm worker's adapter calls the tokenizer's template with the tools and generation prompt it is given."""
    seen: list[dict[str, Any]] = []

    class Tokenizer:
        has_chat_template = True

        def apply_chat_template(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
            seen.append(kwargs)
            return str(
                template("Qwen3-Coder").render(
                    messages, tools=kwargs["tools"], generation=kwargs["add_generation_prompt"]
                )
            )

    class Provider:
        tokenizer = Tokenizer()
        cli_args = type("Args", (), {"chat_template_args": {"enable_thinking": False}})()

    conversations = for_provider(Provider())
    assert conversations is not None
    conversations.adapter(CHAT_TOOLS)
    assert seen and all(k["tools"] == CHAT_TOOLS and k["tokenize"] is False for k in seen)
    assert {k["add_generation_prompt"] for k in seen} == {True} and seen[0]["enable_thinking"] is False


def test_two_user_messages_with_an_image_join_on_an_alternating_template() -> None:
    """On Mistral Small 3.2 a user message with an image after another joins it, the image kept, and turns grow."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    first: list[dict[str, Any]] = [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "<environment_context/>"},
        {"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]},
    ]
    second = [*first, {"role": "assistant", "content": "A cat."}, {"role": "user", "content": "And now?"}]
    bodies = [{"model": "default_model", "messages": m} for m in (first, second)]
    prompts = served_prompts(template("Mistral-Small-3.2-24B-Instruct-2506"), bodies)
    assert all(p.error is None for p in prompts), [p.error and p.error.message for p in prompts]
    assert "[INST]<environment_context/>\n\n[IMG]What is this?[/INST]" in prompts[0].prompt
    assert prompts[1].prompt.startswith(prompts[0].cut) and prompts[1].prompt.count("[IMG]") == 1


# Turns rewritten in the image sessions, beyond the text sessions' QUESTION_REWRITES, with the reason.
IMAGE_REWRITES = {
    # the picture of a call output comes as a user message after the outputs (mlx_vlm reads images from user
    # messages only): it is Qwen3.5's new "last user query", so earlier turns lose their empty <think></think>
    ("Qwen3.5-4B", "codex"): {PICTURED},
}
# Image sessions refused from a turn on: the template's words. Mistral Small 3.2: the picture of a tool result
# comes as a user message after the results, which breaks its alternation (a user message with an image is not
# joined into the result: mlx_vlm's chat endpoint reads no image from a tool message).
IMAGE_REFUSED = {
    ("Mistral-Small-3.2-24B-Instruct-2506", "claude_code"): (PICTURED, "conversation roles must alternate"),
    ("Mistral-Small-3.2-24B-Instruct-2506", "codex"): (PICTURED, "conversation roles must alternate"),
}


def _images(body: dict[str, Any]) -> int:
    return sum(
        1
        for m in body["messages"]
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if part.get("type") == "image_url"
    )


@pytest.mark.parametrize("shape", list(IMAGE_SHAPES))
@pytest.mark.parametrize("name", list(VISION))
def test_image_sessions_grow_through_the_vlm_worker(name: str, shape: str) -> None:
    """Through the mlx-vlm worker's path, image sessions grow with every image as its placeholder, or the listed 400."""
    model_type, placeholder = VISION[name]
    bodies = IMAGE_SHAPES[shape]()
    assert sum(map(_images, bodies)) > 0
    prompts = vlm_served_prompts(template(name), model_type, bodies)
    refused = {n: p.error for n, p in enumerate(prompts) if p.error is not None}
    rewrites = {
        n
        for n in range(1, len(prompts))
        if n not in refused and n - 1 not in refused and not prompts[n].prompt.startswith(prompts[n - 1].cut)
    }
    expected = IMAGE_REWRITES.get((name, shape), set())
    if shape in QUESTION_REWRITES.get(name, ()) and not expected:
        expected = {QUESTION}
    if name in REFUSED:
        assert set(refused) == set(range(1, TURNS)) and not rewrites
        assert all(REFUSED[name] in e.message and e.code == "template_error" for e in refused.values())
        return
    first, words = IMAGE_REFUSED.get((name, shape), (TURNS, ""))
    assert set(refused) == set(range(first, TURNS)), {n: e.message for n, e in refused.items()}
    assert all(words in e.message and (e.status, e.code) == (400, "template_error") for e in refused.values())
    assert rewrites == {n for n in expected if n < first}
    for body, prompt in zip(bodies, prompts, strict=True):
        if prompt.error is None:
            assert prompt.prompt.count(placeholder) == _images(body)


def test_the_vlm_worker_probes_with_the_requests_tools() -> None:
    """On the mlx-vlm path Hermes (it loops over tools unguarded) keeps a late message in place: probed with tools."""
    hermes = template("NousResearch-Hermes-3-Llama-3.1-8B-tool_use")
    body = {
        "model": "default_model",
        "messages": [
            {"role": "system", "content": "Rules."},
            {"role": "user", "content": "Hi."},
            {"role": "assistant", "content": "Hello."},
            {"role": "system", "content": "Zulu reminder."},
            {"role": "user", "content": "Again."},
        ],
        "tools": CHAT_TOOLS,
    }
    (prompt,) = vlm_served_prompts(hermes, "text", [body])
    assert prompt.error is None
    assert "<|im_start|>system\nZulu reminder.<|im_end|>" in prompt.prompt
    assert prompt.prompt.index("Hello.") < prompt.prompt.index("Zulu reminder.") < prompt.prompt.index("Again.")


def test_the_vlm_worker_takes_the_adapters_steps() -> None:
    """On the mlx-vlm path Mistral's ids are 9 letters and digits and Llama 3.3's parallel calls become single calls."""
    bodies = SHAPES["claude_code"]()[:2]
    mistral = vlm_served_prompts(template("Mistral-Small-3.2-24B-Instruct-2506"), "mistral3", bodies)
    first_id = bodies[1]["messages"][-4]["tool_calls"][0]["id"]
    assert all(p.error is None for p in mistral)
    assert f"[CALL_ID]{short_id(first_id)}[ARGS]" in mistral[1].prompt and first_id not in mistral[1].prompt
    (llama,) = vlm_served_prompts(template("meta-llama-Llama-3.3-70B-Instruct"), "text", bodies[1:])
    # the two calls, each in a turn of its own (the tool list names Read once more); unsplit, Llama refuses them
    assert llama.error is None and llama.prompt.count('"name": "Read"') == 3


def test_a_template_refusal_on_the_vlm_worker_is_a_400() -> None:
    """A conversation the template refuses on the mlx-vlm path answers 400 template_error with the remedy."""
    (_, refused) = vlm_served_prompts(template("Kimi-K2-Instruct"), "text", SHAPES["opencode"]()[:2])
    assert refused.error is not None and (refused.error.status, refused.error.code) == (400, "template_error")
    assert refused.error.message.endswith(f"; {REMEDY}.")


@pytest.mark.parametrize("name", ["Mistral-Small-3.2-24B-Instruct-2506", "Qwen3.5-4B", "google-gemma-3-it"])
@PROPERTY
@given(messages=_hostile_messages())
def test_a_hostile_conversation_on_the_vlm_worker_renders_or_answers_4xx(
    name: str, messages: list[dict[str, Any]]
) -> None:
    """Whatever the messages hold, the mlx-vlm path gives a prompt, mlx_vlm's own 422, or a 400, never a 500."""
    from pydantic import ValidationError

    body = {"model": "default_model", "messages": messages, "tools": CHAT_TOOLS}
    try:
        (prompt,) = vlm_served_prompts(template(name), VISION[name][0], [body])
    except ValidationError:  # mlx_vlm's request model refuses it: 422 before anything renders
        return
    assert prompt.error is None or prompt.error.status == 400, prompt.error.message
