"""The names of mlx_vlm's server the mlx-vlm worker relies on, and its late system messages kept in place."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import SeamChanged
from mlx_agent.runtime.entries import mlx_vlm_server
from mlx_agent.runtime.entries.mlx_vlm_server import (
    NORMALIZER,
    RENDERER,
    AdaptedRender,
    InstructionPlacer,
    TemplateRefusal,
    check_vlm_seams,
)
from mlx_agent.runtime.serving.system_turns import MARKER
from tests.fixtures.tiny_vlm import IMAGE_PAD, build_tiny_vlm

SEAMS = [(module, dotted) for module, callables in mlx_vlm_server.VLM_SEAMS.items() for dotted in callables]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """Load the tiny Qwen2-VL model's processor and config as mlx_vlm's server does."""
    from mlx_vlm.utils import load, load_config

    path = build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-qwen2-vl")
    _, processor = load(str(path))
    return processor, load_config(str(path))


def render(loaded: tuple[Any, Any], messages: list[dict[str, Any]]) -> str:
    """Render ``messages`` through mlx_vlm's server's own template function, with the generation prompt."""
    return mlx_vlm_server.vlm_render(*loaded)(messages, True)


def fold(messages: list[dict[str, Any]], instructions: str | None = None) -> str | None:
    """Call mlx_vlm's own normalizer (it folds every system message into the first)."""
    from mlx_vlm.server import request_normalization

    normalized: str | None = getattr(request_normalization, NORMALIZER)(messages, instructions)
    return normalized


def test_installed_mlx_vlm_has_every_seam() -> None:
    """The installed mlx_vlm offers every function and parameter the wrapper uses, and its endpoints still normalize."""
    check_vlm_seams()


@pytest.mark.parametrize(("module", "dotted"), SEAMS, ids=[f"{m}.{d}" for m, d in SEAMS])
def test_a_renamed_seam_fails_loudly(monkeypatch: pytest.MonkeyPatch, module: str, dotted: str) -> None:
    """If upstream renames any name we use, the check names it instead of serving unpatched."""
    owner: Any = importlib.import_module(module)
    *parents, name = dotted.split(".")
    for part in parents:
        owner = getattr(owner, part)
    monkeypatch.delattr(owner, name)
    with pytest.raises(SeamChanged, match=name):
        check_vlm_seams()


def test_a_changed_signature_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the normalizer takes other parameters, the check says what it takes now."""
    from mlx_vlm.server import openai

    def normalize(messages: list[Any], instructions: str | None = None) -> None:
        raise AssertionError

    monkeypatch.setattr(openai, NORMALIZER, normalize)
    with pytest.raises(SeamChanged, match="expected to start with"):
        check_vlm_seams()


def test_an_endpoint_that_stops_normalizing_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the chat endpoint no longer passes its messages through the normalizer, replacing it would do nothing."""
    from mlx_vlm.server import openai

    async def chat_completions_endpoint(request: Any, http_request: Any) -> None:
        raise AssertionError

    monkeypatch.setattr(openai, "chat_completions_endpoint", chat_completions_endpoint)
    with pytest.raises(SeamChanged, match=f"chat_completions_endpoint no longer calls {NORMALIZER}"):
        check_vlm_seams()


def test_a_changed_seam_stops_the_worker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """serve() exits with status 2 and names the seam, before it binds its socket."""
    from mlx_vlm.server import compaction

    monkeypatch.delattr(compaction, NORMALIZER)
    socket_path = tmp_path / "w.sock"
    assert mlx_vlm_server.serve(["--model", "m", "--mlx-agent-socket", str(socket_path)]) == 2
    assert f"compaction.{NORMALIZER}" in capsys.readouterr().err and not socket_path.exists()


def test_a_late_system_message_stays_at_its_place(loaded: tuple[Any, Any]) -> None:
    """Leading system and developer messages join; a late one renders between the turns it was sent between."""
    messages: list[dict[str, Any]] = [
        {"role": "developer", "content": "Alpha rules."},
        {"role": "system", "content": "Bravo rules."},
        {"role": "user", "content": [{"type": "text", "text": "Look."}, {"type": "image"}]},
        {"role": "assistant", "content": "Red."},
        {"role": "system", "content": "Zulu reminder."},
        {"role": "system", "content": ""},
        {"role": "user", "content": "Again."},
    ]
    placer = InstructionPlacer(fold, lambda: loaded)
    assert placer(messages, "Charlie instructions.") == "Charlie instructions.\n\nAlpha rules.\n\nBravo rules."
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "system", "user"]
    prompt = render(loaded, messages)
    assert prompt.index("Red.") < prompt.index("<|im_start|>system\nZulu reminder.") < prompt.index("Again.")
    assert prompt.count(IMAGE_PAD) == 1 and MARKER not in prompt


def test_an_append_only_conversation_renders_a_growing_prompt(loaded: tuple[Any, Any]) -> None:
    """Each turn's prompt (without the generation prompt) starts with the previous turn's, reminders included."""
    placer = InstructionPlacer(fold, lambda: loaded)
    conversation: list[dict[str, Any]] = [{"role": "system", "content": "Alpha rules."}]
    previous = ""
    for number in range(4):
        conversation += [
            {"role": "user", "content": f"Question {number}."},
            {"role": "assistant", "content": f"Answer {number}."},
            {"role": "system", "content": f"Reminder {number}."},
        ]
        messages = [dict(m) for m in conversation]
        placer(messages)
        prompt = mlx_vlm_server.vlm_render(*loaded)(messages, False)
        assert prompt.startswith(previous) and prompt.count(f"Reminder {number}.") == 1
        previous = prompt
    folded = [dict(m) for m in conversation]
    fold(folded)
    assert not mlx_vlm_server.vlm_render(*loaded)(folded, False).startswith(previous[: previous.index("Question 1")])


def test_without_a_loaded_model_it_folds_as_mlx_vlm_does() -> None:
    """With nothing to render with, the placer gives exactly what mlx_vlm's own normalizer gives."""
    sent = [
        {"role": "system", "content": "Alpha rules."},
        {"role": "user", "content": "Hi."},
        {"role": "system", "content": "Zulu reminder."},
    ]
    theirs, ours = [dict(m) for m in sent], [dict(m) for m in sent]
    expected = fold(theirs, "Be brief.")
    assert InstructionPlacer(fold, lambda: None)(ours, "Be brief.") == expected and ours == theirs


def test_install_places_and_adapts_where_the_endpoints_look(
    monkeypatch: pytest.MonkeyPatch, loaded: tuple[Any, Any]
) -> None:
    """The endpoints' normalizer keeps late messages in place; the function they render with adapts, then renders."""
    from fastapi import FastAPI

    vlm_app: Any = importlib.import_module("mlx_vlm.server.app")
    from mlx_vlm.server.runtime import ModelCacheRegistry, runtime

    server: Any = importlib.import_module("mlx_vlm.server")
    for module in mlx_vlm_server.PLACED_IN:  # restored after the test
        imported = importlib.import_module(module)
        monkeypatch.setattr(imported, NORMALIZER, getattr(imported, NORMALIZER))
    monkeypatch.setattr(server, RENDERER, getattr(server, RENDERER))
    registry = ModelCacheRegistry()
    monkeypatch.setattr(runtime, "model_cache", registry)
    placer = mlx_vlm_server.install_placer()
    assert all(getattr(importlib.import_module(m), NORMALIZER) is placer for m in mlx_vlm_server.PLACED_IN)
    late = [{"role": "user", "content": "Hi."}, {"role": "system", "content": "Zulu reminder."}]
    folded = [dict(m) for m in late]
    placer(folded)  # nothing loaded yet: folded as mlx_vlm folds
    assert [m["role"] for m in folded] == ["system", "user"]
    registry.set("text_generation", {"processor": loaded[0], "config": loaded[1]})
    placed = [dict(m) for m in late]
    placer(placed)
    assert placed == late

    app = FastAPI()
    adapted = mlx_vlm_server.install_adapter(app)
    assert getattr(server, RENDERER) is adapted and mlx_vlm_server.install_adapter(app) is adapted
    assert TemplateRefusal in app.exception_handlers
    # the endpoints' own dependency reaches the adapter, whose probes and rendering get the request's tools
    seen: list[Any] = []
    original = adapted.original

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("tools"))
        return original(*args, **kwargs)

    monkeypatch.setattr(adapted, "original", recording)
    tools = [{"type": "function", "function": {"name": "probe_tool"}}]
    prompt = vlm_app._protocol_deps.apply_chat_template(*loaded, placed, tools=tools)
    assert len(seen) > 1 and all(t == tools for t in seen)
    assert prompt.index("Hi.") < prompt.index("<|im_start|>system\nZulu reminder.")


def test_endpoints_that_render_by_themselves_fail_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the endpoints' dependency stops looking up mlx_vlm.server's renderer, adapting there would do nothing."""
    from mlx_vlm.prompt_utils import apply_chat_template

    vlm_app: Any = importlib.import_module("mlx_vlm.server.app")

    monkeypatch.setattr(vlm_app._protocol_deps, RENDERER, apply_chat_template)
    with pytest.raises(SeamChanged, match=f"no longer render through mlx_vlm.server.{RENDERER}"):
        check_vlm_seams()


def test_a_template_refusal_answers_400_with_the_remedy(loaded: tuple[Any, Any]) -> None:
    """A template's own refusal while rendering becomes TemplateRefusal: 400 template_error naming --chat-template."""
    processor, config = loaded

    def refusing(*args: Any, **kwargs: Any) -> str:
        raise ValueError("Conversation roles must alternate")

    with pytest.raises(TemplateRefusal) as caught:
        AdaptedRender(refusing)(processor, config, [{"role": "user", "content": "Hi."}])
    error = caught.value.error
    assert (caught.value.status_code, error.status, error.code) == (400, 400, "template_error")
    assert "Conversation roles must alternate" in error.message and "--chat-template FILE" in error.message
    answer = mlx_vlm_server.answer_refusal(None, caught.value)
    assert answer.status_code == 400 and b'"code":"template_error"' in answer.body


@pytest.mark.parametrize(
    ("asked", "asked_kind", "drafter", "kind", "dropped"),
    [
        (None, None, None, None, False),
        ("/d", None, object(), "dflash", False),
        ("/d", "mtp", object(), "mtp", False),
        ("/d", None, None, None, True),  # mlx_vlm found it incompatible and serves without it
        ("/d", "mtp", object(), "dflash", True),  # mlx_vlm used the drafter's own family instead
    ],
)
def test_a_draft_mlx_vlm_would_not_run_as_planned_fails_the_load(
    asked: str | None, asked_kind: str | None, drafter: object, kind: str | None, dropped: bool
) -> None:
    """A planned drafter that mlx_vlm dropped, or runs as another family, is named; a fitting one is not."""
    assert (mlx_vlm_server.draft_dropped(asked, asked_kind, drafter, kind) is not None) == dropped
