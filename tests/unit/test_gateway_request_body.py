"""Request bodies: routed to a served model by name or alias, no request-time adapters, reply limits as planned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.bodies import Body, ChatBody, CompletionBody, check, load_json
from mlx_agent.errors import BodyInvalid, RequestRefused
from mlx_agent.gateway.door.config import parse_config
from mlx_agent.gateway.models.fleet import Fleet
from mlx_agent.gateway.request import prepare
from mlx_agent.records.front import FrontModelConfig
from tests.gateway_support import gateway_config
from tests.unit.request_bodies import chat, model

pytestmark = pytest.mark.fast


def refused(body: Any, declaration: type[Body] = ChatBody) -> RequestRefused | BodyInvalid:
    """Return the refusal the front's road (declaration, then ``prepare``) gives ``body``."""
    with pytest.raises((RequestRefused, BodyInvalid)) as info:
        doc = load_json(json.dumps(body).encode())
        prepare(check(declaration, doc).sent, model=model(max_tokens=64))
    error = info.value
    assert isinstance(error, RequestRefused | BodyInvalid)
    return error


def fleet(tmp_path: Path) -> Fleet:
    """Return a fleet of two models: org/tiny (alias claude-*) and org/small (aliases gpt-4o, gpt-*)."""
    config = gateway_config(
        tmp_path,
        8080,
        ["python", "w.py", "--port", "{port}"],
        model_path=tmp_path / "tiny",
        alias=["claude-*"],
        socket_dir=str(tmp_path / "sockets"),  # its own, not a temp one left for the next front to sweep
    )
    second = {
        **config["models"][0],
        "served_model_name": "org/small",
        "alias": ["gpt-4o", "gpt-*"],
        "hidden_names": [str(tmp_path / "small")],
    }
    config["models"].append(second)
    return Fleet(parse_config(config))


@pytest.mark.parametrize(
    ("name", "reply_name"),
    [("org/tiny", "org/tiny"), ("default_model", "org/tiny"), (None, "org/tiny"), ("claude-haiku", "claude-haiku")],
)
def test_the_worker_sees_default_model_and_the_reply_names_the_model(name: str | None, reply_name: str) -> None:
    """The worker always gets default_model; the reply uses the client's name, or the served one."""
    prepared = prepare(chat(model=name) if name else chat(), model=model(max_tokens=64))
    assert prepared.body["model"] == "default_model"
    assert prepared.client_model == reply_name


def test_routing_by_name_alias_and_hidden_name(tmp_path: Path) -> None:
    """Names, glob aliases (first match in plan order) and hidden names route; no model means the first."""
    models = fleet(tmp_path)
    assert models.route("org/small").name == "org/small"
    assert models.route("claude-sonnet-4-5").name == "org/tiny"
    assert models.route("gpt-5-codex").name == "org/small"
    assert models.route("default_model").name == "org/tiny"
    assert models.route(str(tmp_path / "small")).name == "org/small"
    assert models.route(None).name == "org/tiny"


def test_an_unknown_model_is_a_404_listing_the_served_names(tmp_path: Path) -> None:
    """An unknown name gets 404 model_not_found naming every served name and alias, never default_model."""
    with pytest.raises(RequestRefused) as info:
        fleet(tmp_path).route("llama-3")
    refusal = info.value
    assert (refusal.status, refusal.code, refusal.param, refusal.type_) == (
        404,
        "model_not_found",
        "model",
        "not_found_error",
    )
    assert "org/tiny, claude-*, org/small, gpt-4o, gpt-*" in refusal.message
    assert "default_model" not in refusal.message


@pytest.mark.parametrize("field", ["adapters", "adapter", "adapter_path", "draft_model"])
def test_request_time_adapters_and_draft_models_are_refused(field: str) -> None:
    """Adapter and draft-model overrides are refused with the field as param."""
    refusal = refused(chat(**{field: "/x"}))
    assert isinstance(refusal, RequestRefused) and (refusal.status, refusal.param) == (400, field)


def test_reply_limits_default_ceiling_and_context() -> None:
    """No limit: the plan's; the request's own: honoured up to the ceiling, else left for the worker to cut."""

    def limit(m: FrontModelConfig, **fields: Any) -> Any:
        return prepare(chat(**fields), model=m).body["max_tokens"]

    plain = model(max_tokens=64)
    assert limit(plain) == 64
    assert limit(plain, max_tokens=32000) == 32000  # the worker cuts by what the context leaves after the prompt
    assert limit(plain, max_completion_tokens=500, max_tokens=900) == 500
    assert limit(model(max_tokens=64, max_tokens_ceiling=4096), max_tokens=32000) == 4096
    tcp_windowed = model(max_tokens=64, context_window=2048)  # a runtime's own server: cut by the window
    assert limit(tcp_windowed, max_tokens=32000) == 2048
    body = prepare(chat(max_completion_tokens=50), model=plain).body
    assert "max_completion_tokens" not in body and body["max_tokens"] == 50
    assert refused(chat(max_tokens="many")).param == "max_tokens"
    assert refused(chat(max_tokens=0)).param == "max_tokens"


def test_n_above_one_is_refused_clearly() -> None:
    """N > 1 cannot be honoured by the local runtime and is refused with param n (n = 1 is fine)."""
    assert refused(chat(n=3)).param == "n"
    assert prepare(chat(n=1), model=model()).body["n"] == 1


def test_malformed_bodies_are_refused() -> None:
    """Non-object bodies, missing messages or prompt, and a non-boolean stream are 400s."""
    assert refused([1]).param == "body"
    assert refused({"prompt": "x"}).param == "messages"
    assert refused({"messages": []}, CompletionBody).param == "prompt"
    assert refused(chat(stream="yes")).param == "stream"


def test_forced_usage_is_remembered_as_not_requested() -> None:
    """With force_usage a stream asks the worker for usage, and the client's own wish is kept apart."""
    prepared = prepare(chat(stream=True), model=model(), force_usage=True)
    assert prepared.body["stream_options"] == {"include_usage": True} and not prepared.usage_requested
    asked = prepare(chat(stream=True, stream_options={"include_usage": True}), model=model(), force_usage=True)
    assert asked.usage_requested
