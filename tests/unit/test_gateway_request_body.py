"""Request bodies: only the planned model, no request-time adapters, token limits clamped."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.openai.request import prepare

NAMES = frozenset({"org/tiny", "default_model", "/models/tiny"})


def chat(**fields: Any) -> dict[str, Any]:
    """Return a chat body with ``fields`` added."""
    return {"messages": [{"role": "user", "content": "hi"}], **fields}


def refused(body: Any, endpoint: str = "chat") -> RequestRefused:
    """Return the refusal ``prepare`` raises for ``body``."""
    with pytest.raises(RequestRefused) as info:
        prepare(body, endpoint=endpoint, names=NAMES, max_tokens=64)
    return info.value


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_name_of_the_model_is_sent_as_default_model(name: str) -> None:
    """The id, default_model and the path are accepted; the worker always sees default_model."""
    prepared = prepare(chat(model=name), endpoint="chat", names=NAMES, max_tokens=64)
    assert prepared.body["model"] == "default_model"
    assert prepared.client_model == (None if name == "default_model" else name)


def test_another_model_is_model_not_found() -> None:
    """A request naming another model gets an OpenAI-style 400 on param model."""
    refusal = refused(chat(model="other/model"))
    assert (refusal.status, refusal.code, refusal.param, refusal.type_) == (
        400, "model_not_found", "model", "invalid_request_error")


@pytest.mark.parametrize("field", ["adapters", "adapter", "adapter_path", "draft_model"])
def test_request_time_adapters_and_draft_models_are_refused(field: str) -> None:
    """Adapter and draft-model overrides are refused with the field as param."""
    refusal = refused(chat(**{field: "/x"}))
    assert (refusal.status, refusal.param) == (400, field)


def test_token_limits_are_clamped_or_filled_in() -> None:
    """max_tokens and max_completion_tokens are clamped to the plan; absent, max_tokens is set to it."""
    assert prepare(chat(max_tokens=1000), endpoint="chat", names=NAMES, max_tokens=64).body["max_tokens"] == 64
    assert prepare(chat(max_tokens=8), endpoint="chat", names=NAMES, max_tokens=64).body["max_tokens"] == 8
    both = prepare(chat(max_completion_tokens=500), endpoint="chat", names=NAMES, max_tokens=64).body
    assert both["max_completion_tokens"] == 64 and "max_tokens" not in both
    assert prepare(chat(), endpoint="chat", names=NAMES, max_tokens=64).body["max_tokens"] == 64
    assert refused(chat(max_tokens="many")).param == "max_tokens"


def test_malformed_bodies_are_refused() -> None:
    """Non-object bodies, missing messages or prompt, and a non-boolean stream are 400s."""
    assert refused([1]).param == "body"
    assert refused({"prompt": "x"}).param == "messages"
    assert refused({"messages": []}, endpoint="completions").param == "prompt"
    assert refused(chat(stream="yes")).param == "stream"


def test_forced_usage_is_remembered_as_not_requested() -> None:
    """With force_usage a stream asks the worker for usage, and the client's own wish is kept apart."""
    prepared = prepare(chat(stream=True), endpoint="chat", names=NAMES, max_tokens=64, force_usage=True)
    assert prepared.body["stream_options"] == {"include_usage": True} and not prepared.usage_requested
    asked = prepare(chat(stream=True, stream_options={"include_usage": True}), endpoint="chat", names=NAMES,
                    max_tokens=64, force_usage=True)
    assert asked.usage_requested
