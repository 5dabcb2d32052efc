"""``POST /v1/rerank``: read and routed, then refused by every model with a way to rank by embeddings instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import parse
from mlx_agent.gateway.openai.bodies import RerankBody
from mlx_agent.gateway.openai.embeddings import refuse_rerank
from tests.unit.fleets import fleet

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(("name", "kind"), [("embed", "an embedding model"), ("org/tiny", "a chat model")])
def test_every_model_refuses_rerank_naming_itself_and_the_embeddings_route(
    tmp_path: Path, name: str, kind: str
) -> None:
    """An embedding model and a chat model are both 400 model_not_reranker, pointing at /v1/embeddings."""
    refusal = refuse_rerank(fleet(tmp_path), name)
    assert (refusal.status, refusal.code, refusal.param) == (400, "model_not_reranker", "model")
    assert f"'{name}' is {kind}" in refusal.message and "POST /v1/embeddings" in refusal.message


def test_an_alias_is_routed_before_the_refusal(tmp_path: Path) -> None:
    """A rerank client's stock name reaches the model its alias names, which then refuses."""
    assert "'embed'" in refuse_rerank(fleet(tmp_path), "text-embedding-3-small").message


def test_an_unknown_model_is_404_not_the_rerank_refusal(tmp_path: Path) -> None:
    """A name no model answers to is model_not_found, as on every other endpoint."""
    with pytest.raises(RequestRefused) as info:
        refuse_rerank(fleet(tmp_path), "no-such-model")
    assert (info.value.status, info.value.code) == (404, "model_not_found")


def test_the_body_takes_cohere_and_jina_fields() -> None:
    """query, documents, top_n and return_documents are read; a top_n below 1 is refused by the declaration."""
    body = parse(RerankBody, {"model": "m", "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1})
    assert (body.model, body.top_n) == ("m", 1)
    with pytest.raises(RequestRefused) as info:
        parse(RerankBody, {"model": "m", "query": "q", "documents": ["a"], "top_n": 0})
    assert info.value.param == "top_n"
