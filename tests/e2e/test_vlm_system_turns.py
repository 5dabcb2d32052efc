"""End to end: an mlx-vlm worker keeps a late system message at its place, with images, on every API.

A real front over the real wrapped mlx-vlm worker on the tiny Qwen2-VL model. The worker's prompt token count
is compared with the fixture's own template and tokenizer rendering the conversation both ways (the late
message at its place, and folded into the first as mlx_vlm does); an image adds the same tokens either way.
mlx_vlm's prefix cache (APC) is off by default (and refuses this model: it has no ``make_cache``), so every
API says 0 cached tokens, as the worker does.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.wire import SOCKET_FLAG
from tests.conftest import free_port
from tests.e2e.test_prompt_cache_hits import APIS, turn
from tests.e2e.test_runtimes import png
from tests.fixtures.tiny_vlm import VLM_CHAT_TEMPLATE, build_tiny_vlm
from tests.gateway_support import Gateway, gateway_config, start_gateway
from tests.prompt_templates import renderer

pytestmark = pytest.mark.e2e

SYSTEM = "You describe pictures for a careful reader. " * 6
LATE = "Reminder: answer in one short line."


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build one tiny random-weight Qwen2-VL model for this module."""
    return build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-qwen2-vl")


@contextlib.contextmanager
def vlm_front(directory: Path, model: Path) -> Iterator[Gateway]:
    """Run a front over the wrapped mlx-vlm worker on ``model``, as serve plans it (socket, readiness, name)."""
    argv = [sys.executable, "-m", "mlx_agent.runtime", "mlx-vlm", "--model", str(model), "--max-tokens", "4"]
    config = gateway_config(directory, free_port(), [*argv, SOCKET_FLAG, "{socket}"], model_path=model)
    worker = config["models"][0]["worker"]
    worker["model_name"] = str(model)  # mlx_vlm serves its model under its path
    worker["readiness"] = {"path": "/health", "status": 200, "json": {"status": "healthy"}, "nonnull": ["loaded_model"]}
    gateway = start_gateway(directory, config)
    try:
        yield gateway
    finally:
        gateway.stop()


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


@pytest.fixture(scope="module")
def front(tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One front over the mlx-vlm worker as it runs by default (its prefix cache off)."""
    with vlm_front(tmp_path_factory.mktemp("vlm-front"), tiny_vlm) as gateway:
        yield gateway


@pytest.mark.parametrize("api", APIS)
def test_a_late_system_message_renders_at_its_place(front: Gateway, tiny_vlm: Path, api: str) -> None:
    """The worker's prompt holds the late system turn where it was sent, and it says honestly that none was cached."""
    messages = conversation(late=True)
    prompt, cached, _ = turn(front, api, False, messages)
    folded = [{"role": "system", "content": f"{SYSTEM}\n\n{LATE}"}, *conversation(late=False)[1:]]
    in_place, as_folded = token_count(tiny_vlm, messages), token_count(tiny_vlm, folded)
    assert in_place != as_folded, "the two renderings must differ for the check to mean anything"
    assert prompt == in_place, (prompt, in_place, as_folded)
    assert cached == 0  # mlx_vlm caches no prefix with its APC off, and the front invents none


def test_images_still_work_with_a_late_system_message(front: Gateway, tiny_vlm: Path) -> None:
    """An image in the first user turn adds as many tokens with the late message in place as without it, and answers."""
    image = {"type": "image_url", "image_url": {"url": png()}}

    def with_image(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first_user = {"role": "user", "content": [{"type": "text", "text": messages[1]["content"]}, image]}
        return [messages[0], first_user, *messages[2:]]

    prompts = {}
    for late in (False, True):
        text_only, _, _ = turn(front, "chat", False, conversation(late))
        pictured, cached, reply = turn(front, "chat", True, with_image(conversation(late)))
        assert text_only == token_count(tiny_vlm, conversation(late)) and cached == 0 and reply
        prompts[late] = (text_only, pictured)
    image_tokens = prompts[False][1] - prompts[False][0]
    assert image_tokens > 2  # the vision start and end tokens, and the image's pad tokens
    assert prompts[True][1] - prompts[True][0] == image_tokens, prompts
