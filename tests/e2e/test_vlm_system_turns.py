"""End to end: an mlx-vlm worker keeps a late system message at its place, with images, on every API.

A real front over the real wrapped mlx-vlm worker on the tiny Qwen2-VL model. The worker's prompt token count
is compared with the fixture's own template and tokenizer rendering the conversation both ways (the late
message at its place, and folded into the first as mlx_vlm does); an image adds the same tokens either way.
mlx_vlm's prefix cache (APC) is off by default (and refuses this model: it has no ``make_cache``), so every
API says 0 cached tokens, as the worker does.

With Qwen3.5's real template on the same model, agent sessions with images and tools answer 200 on every turn and
the worker renders the growing prompt that the worker's path renders in-process; a template that refuses (Gemma 3
on a tool result) answers 400 ``template_error``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent_sessions import PICTURED, QUESTION
from tests.e2e.api_turns import APIS, turn
from tests.e2e.vision_support import vision_front
from tests.fixtures.tiny_vlm import IMAGE_PAD, VLM_CHAT_TEMPLATE, build_tiny_vlm
from tests.gateway_support import Gateway
from tests.media_traps import png
from tests.prompt_templates import renderer

pytestmark = pytest.mark.e2e

SYSTEM = "You describe pictures for a careful reader. " * 6
LATE = "Reminder: answer in one short line."


def conversation(late: bool) -> list[dict[str, Any]]:
    """Return a text-only conversation: system, user, assistant, (a late system message), user."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is in the picture?"},
        {"role": "assistant", "content": "A red square."},
    ]
    if late:
        messages.append({"role": "system", "content": LATE})
    return [*messages, {"role": "user", "content": "And its size?"}]


def token_count(model: Path, messages: list[dict[str, Any]]) -> int:
    """Return how many tokens the fixture's template and tokenizer make of ``messages`` (with the generation prompt)."""
    from tokenizers import Tokenizer

    prompt = renderer(VLM_CHAT_TEMPLATE)(messages, True)
    return len(Tokenizer.from_file(str(model / "tokenizer.json")).encode(prompt, add_special_tokens=False).ids)


@pytest.mark.parametrize("api", APIS)
def test_a_late_system_message_renders_at_its_place(vlm_front: Gateway, tiny_vlm: Path, api: str) -> None:
    """The worker's prompt holds the late system turn where it was sent, and it says honestly that none was cached."""
    messages = conversation(late=True)
    prompt, cached, _ = turn(vlm_front, api, False, messages)
    folded = [{"role": "system", "content": f"{SYSTEM}\n\n{LATE}"}, *conversation(late=False)[1:]]
    in_place, as_folded = token_count(tiny_vlm, messages), token_count(tiny_vlm, folded)
    assert in_place != as_folded, "the two renderings must differ for the check to mean anything"
    assert prompt == in_place, (prompt, in_place, as_folded)
    assert cached == 0  # mlx_vlm caches no prefix with its APC off, and the front invents none


def test_images_still_work_with_a_late_system_message(vlm_front: Gateway, tiny_vlm: Path) -> None:
    """An image in the first user turn adds as many tokens with the late message in place as without it, and answers."""
    image = {"type": "image_url", "image_url": {"url": png()}}

    def with_image(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first_user = {"role": "user", "content": [{"type": "text", "text": messages[1]["content"]}, image]}
        return [messages[0], first_user, *messages[2:]]

    prompts = {}
    for late in (False, True):
        text_only, _, _ = turn(vlm_front, "chat", False, conversation(late))
        pictured, cached, reply = turn(vlm_front, "chat", True, with_image(conversation(late)))
        assert text_only == token_count(tiny_vlm, conversation(late)) and cached == 0 and reply
        prompts[late] = (text_only, pictured)
    image_tokens = prompts[False][1] - prompts[False][0]
    assert image_tokens > 2  # the vision start and end tokens, and the image's pad tokens
    assert prompts[True][1] - prompts[True][0] == image_tokens, prompts


QWEN35 = "Qwen3.5-4B"  # a real template that takes images, with the tiny Qwen2-VL model's vision tokens
# The turn Qwen3.5 rewrites by its own design (tests/unit/test_template_sessions.py lists why): a new user query
# (Codex: the picture of a call output, a user message after the outputs; opencode: the new question).
REWRITTEN = {"codex": PICTURED, "opencode": QUESTION}


@pytest.fixture(scope="module")
def qwen35_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the tiny Qwen2-VL model carrying Qwen3.5's real chat template (its image placeholder is the model's)."""
    import json

    from tests.template_corpus import template

    path = build_tiny_vlm(tmp_path_factory.mktemp("vlm-qwen35") / "tiny-qwen35-vl")
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["chat_template"] = template(QWEN35).source
    config_file.write_text(json.dumps(config), encoding="utf-8")
    # Room for ten agent turns (the tiny tokenizer spends many tokens on Qwen3.5's tool prompt): below it,
    # mlx_vlm would compact the conversation instead of answering it.
    model_config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    model_config["max_position_embeddings"] = model_config["sliding_window"] = 32768
    (path / "config.json").write_text(json.dumps(model_config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def qwen35_front(tmp_path_factory: pytest.TempPathFactory, qwen35_vlm: Path) -> Iterator[Gateway]:
    """Run one front over the mlx-vlm worker on the Qwen3.5-templated model, for every shape's session (APC off)."""
    with vision_front(tmp_path_factory.mktemp("vlm-qwen35-front"), qwen35_vlm) as gateway:
        yield gateway


@pytest.mark.parametrize("shape", ["claude_code", "codex", "opencode"])
def test_an_image_session_with_tools_grows_through_the_worker(
    qwen35_vlm: Path, qwen35_front: Gateway, shape: str
) -> None:
    """Every turn of an image session with tools answers 200, and the worker's prompt is the growing in-process one.

    The worker's prompt tokens equal the in-process rendering's (the worker's own path, ``vlm_served_prompts``)
    tokens plus each image's expansion (one placeholder token becomes the image's pad tokens, the same for every
    image): so the worker rendered that prompt, and each turn's starts with the previous turn's cut.
    """
    from tokenizers import Tokenizer

    from tests.agent_sessions import IMAGE_SHAPES, vlm_served_prompts
    from tests.e2e.api_turns import post
    from tests.template_corpus import template

    bodies = IMAGE_SHAPES[shape]()
    rendered = vlm_served_prompts(template(QWEN35), "qwen2_vl", bodies)
    tokenizer = Tokenizer.from_file(str(qwen35_vlm / "tokenizer.json"))
    extra: set[int] = set()
    # A shared worker: its prefix cache is off, so no earlier session's prompt is reused; nothing unloads it.
    for number, (body, expected) in enumerate(zip(bodies, rendered, strict=True)):
        assert expected.error is None, expected.error.message
        sent = {**body, "model": "org/tiny", "max_tokens": 4, "stream": False}
        sent.pop("stream_options", None)
        sent.pop("reasoning_effort", None)  # a template argument: it changes the generation prompt, not the turns
        answer = post(qwen35_front, "/v1/chat/completions", sent)
        tokens = len(tokenizer.encode(expected.prompt, add_special_tokens=False).ids)
        images = expected.prompt.count(IMAGE_PAD)
        if images:
            extra.add((answer["usage"]["prompt_tokens"] - tokens) // images)
            assert (answer["usage"]["prompt_tokens"] - tokens) % images == 0
        else:
            assert answer["usage"]["prompt_tokens"] == tokens, number
        grows = number == 0 or expected.prompt.startswith(rendered[number - 1].cut)
        assert grows == (number != REWRITTEN.get(shape)), number
    assert len(extra) == 1 and extra.pop() > 0  # every image expands alike: the placeholders were the images
    assert (qwen35_front.status()["loads"], qwen35_front.status()["worker_exits"]) == (1, 0)  # one worker served all


def test_a_template_that_refuses_answers_400_through_the_worker(
    qwen35_vlm: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Gemma 3's template refuses a tool result (no tool role): the worker answers 400 template_error, not 500."""
    import json
    import shutil

    from tests.agent_sessions import IMAGE_SHAPES
    from tests.template_corpus import template

    path = tmp_path_factory.mktemp("vlm-gemma3") / "tiny-gemma3-template"
    shutil.copytree(qwen35_vlm, path)
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = template("google-gemma-3-it").source
    (path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    first, second = IMAGE_SHAPES["opencode"]()[:2]
    with vision_front(tmp_path_factory.mktemp("vlm-gemma3-front"), path) as gateway:
        assert gateway.request("POST", "/v1/chat/completions", {**first, "model": "org/tiny"}, {}).status == 200
        reply = gateway.request("POST", "/v1/chat/completions", {**second, "model": "org/tiny"}, {})
    error = json.loads(reply.body)["error"]
    assert (reply.status, error["code"]) == (400, "template_error"), error
    assert "Conversation roles must alternate" in error["message"] and "--chat-template FILE" in error["message"]
