"""Chat template controls through the wrapped server.

``add_generation_prompt`` and ``continue_final_message`` come from ``chat_template_kwargs`` (bare mlx_lm.server
passes ``add_generation_prompt=True`` itself and fails either with a 404); several system messages fold into
one at the front, and a later one stays at its place (the template here refuses it, as some Qwen templates do, so it
becomes a marked user turn); a top-level ``reasoning_effort``
reaches the template (bare mlx_lm ignores it). The model is scripted to answer " Paris" right after the
token " The capital of France is", so only a prompt that ends inside that assistant message gets it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.wrapped_support import Server, running, scripted_model
from tests.fixtures.tiny_model import CHAT_TEMPLATE

pytestmark = pytest.mark.e2e

PREFILL = " The capital of France is"
TEMPLATE = (
    "{%- if reasoning_effort is defined %}"
    "{{- '<|im_start|>system\\nReasoning: ' + reasoning_effort + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' and not loop.first %}"
    "{{- raise_exception('System message must be at the beginning.') }}{%- endif %}{%- endfor %}" + CHAT_TEMPLATE
)
USER = {"role": "user", "content": "What is the capital of France?"}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the scripted model with the demanding template."""
    return scripted_model(
        tmp_path_factory.mktemp("templates") / "model",
        {PREFILL: " Paris", " Paris": "<|im_end|>"},
        "<|im_end|>",
        plain=[PREFILL, " Paris"],
        template=TEMPLATE,
    )


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[Server]:
    """Serve the scripted model through the wrapped entry."""
    with running(model, model.parent) as started:
        yield started


def answer(server: Server, messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """Ask for a short reply; return the whole answer."""
    status, reply = server.post({"messages": messages, "max_tokens": 4, **fields})
    assert status == 200, reply
    assert isinstance(reply, dict)
    return reply


def prompt_tokens(server: Server, messages: list[dict[str, Any]], **fields: Any) -> int:
    """Return how many tokens the rendered prompt had."""
    tokens: int = answer(server, messages, **fields)["usage"]["prompt_tokens"]
    return tokens


def test_continue_final_message_continues_the_assistant(server: Server) -> None:
    """With continue_final_message the model writes on from the last assistant message's last token."""
    reply = answer(
        server, [USER, {"role": "assistant", "content": PREFILL}], chat_template_kwargs={"continue_final_message": True}
    )
    choice = reply["choices"][0]
    assert (choice["message"]["content"].strip(), choice["finish_reason"]) == ("Paris", "stop")


def test_add_generation_prompt_false_leaves_out_the_assistant_header(server: Server, model: Path) -> None:
    """add_generation_prompt: false renders the conversation without the header that opens a new reply."""
    from tokenizers import Tokenizer

    header = len(Tokenizer.from_file(str(model / "tokenizer.json")).encode("<|im_start|>assistant\n").ids)
    with_header = prompt_tokens(server, [USER])
    without = prompt_tokens(server, [USER], chat_template_kwargs={"add_generation_prompt": False})
    assert with_header - without == header


def test_both_template_switches_on_is_400(server: Server) -> None:
    """Asking to continue the last message and to open a new one at once is refused as a bad argument."""
    status, reply = server.post(
        {
            "messages": [USER, {"role": "assistant", "content": PREFILL}],
            "max_tokens": 4,
            "chat_template_kwargs": {"continue_final_message": True, "add_generation_prompt": True},
        }
    )
    assert status == 400
    assert reply["error"]["param"] == "chat_template_kwargs"


def test_a_late_system_message_stays_at_its_place_as_a_marked_user_turn(server: Server) -> None:
    """The template refuses a late system message, so it is sent at its place as a marked user turn instead."""
    scattered = [{"role": "system", "content": "Be brief."}, USER, {"role": "system", "content": "Be kind."}]
    marked = [
        {"role": "system", "content": "Be brief."},
        USER,
        {"role": "user", "content": "[System message]\nBe kind."},
    ]
    assert prompt_tokens(server, scattered) == prompt_tokens(server, marked)
    leading = [{"role": "system", "content": "Be brief."}, {"role": "developer", "content": "Be kind."}, USER]
    folded = [{"role": "system", "content": "Be brief.\n\nBe kind."}, USER]
    assert prompt_tokens(server, leading) == prompt_tokens(server, folded)  # the leading ones still join


def test_a_developer_message_is_a_system_message(server: Server) -> None:
    """The OpenAI developer role is folded into the system message, which templates know."""
    assert prompt_tokens(server, [{"role": "developer", "content": "Be brief."}, USER]) == prompt_tokens(
        server, [{"role": "system", "content": "Be brief."}, USER]
    )


def test_reasoning_effort_reaches_the_template(server: Server) -> None:
    """A top-level reasoning_effort renders as if it were in chat_template_kwargs; an explicit kwarg wins."""
    plain = prompt_tokens(server, [USER])
    top_level = prompt_tokens(server, [USER], reasoning_effort="high")
    as_kwarg = prompt_tokens(server, [USER], chat_template_kwargs={"reasoning_effort": "high"})
    assert top_level == as_kwarg > plain
    both = prompt_tokens(
        server,
        [USER],
        reasoning_effort="a much longer effort than high",
        chat_template_kwargs={"reasoning_effort": "high"},
    )
    assert both == as_kwarg
