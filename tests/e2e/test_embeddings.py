"""End to end: ``POST /v1/embeddings`` from a reviewed fleet of a chat model and an embedding model.

The CLI previews and confirms a models file naming the tiny chat model (mlx_lm) and a tiny embedding model
(a random-weight Qwen3 in the sentence-transformers layout, ``runtime = "mlx-vlm-embed"``), and the official
``openai`` SDK asks the front for vectors. The vectors are compared with mlx-vlm's own output for the same
input, computed in this process with its loader, pooling and tokenizer, as its server computes them.
"""

from __future__ import annotations

import base64
import json
import struct
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anthropic
import numpy as np
import openai
import pytest

from tests.fixtures.tiny_embed import HIDDEN_SIZE, build_tiny_embed

pytestmark = pytest.mark.e2e

TEXTS = ["hello world", "a longer sentence about fibonacci numbers", "primes"]


class Runtime:
    """mlx-vlm's own embedding of one text or id list, in this process, as its server's ``_embed`` does it."""

    def __init__(self, model_dir: Path) -> None:
        import mlx.core as mx
        from mlx_vlm.embedding_loader import load_embedding_model
        from mlx_vlm.models.pooling import read_pooling_config
        from mlx_vlm.utils import load_processor

        self.mx = mx
        self.model = load_embedding_model(model_dir)
        self.model.pooling_config = read_pooling_config(model_dir)  # type: ignore[no-untyped-call]
        self.tokenizer = load_processor(model_dir, add_detokenizer=False)

    def ids(self, text: str) -> list[int]:
        """Return the tokenizer's ids for ``text``."""
        return [int(i) for i in self.tokenizer([text], return_tensors="np")["input_ids"][0]]

    def vector(self, ids: list[int]) -> np.ndarray:
        """Return the model's pooled, normalised vector for one id list."""
        mx = self.mx
        out = self.model(mx.array([ids]), attention_mask=mx.ones((1, len(ids)))).text_embeds
        mx.eval(out)
        return np.array(out[0].astype(mx.float32))


@pytest.fixture(scope="module")
def runtime(embed_model: Path) -> Runtime:
    """Return the in-process runtime on the tiny embedding model."""
    return Runtime(embed_model)


def client(url: str) -> openai.OpenAI:
    """Return the official OpenAI client on the front (no retries)."""
    return openai.OpenAI(base_url=url + "/v1", api_key="local", timeout=300, max_retries=0)


def post(url: str, body: dict[str, Any], path: str = "/v1/embeddings") -> tuple[int, Any]:
    """POST ``body`` to the front's ``path``; return the status and the JSON answer."""
    request = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_vector_is_the_runtimes_own_output(embed_fleet: str, runtime: Runtime) -> None:
    """One input's vector equals mlx-vlm's own for it, and usage counts its tokens."""
    reply = client(embed_fleet).embeddings.create(model="embed", input=TEXTS[1], encoding_format="float")
    ids = runtime.ids(TEXTS[1])
    assert np.array_equal(np.array(reply.data[0].embedding, dtype=np.float32), runtime.vector(ids))
    assert reply.model == "embed" and reply.usage.prompt_tokens == reply.usage.total_tokens == len(ids)
    assert len(reply.data[0].embedding) == HIDDEN_SIZE


def test_a_list_gives_the_vectors_of_one_by_one_calls(embed_fleet: str, runtime: Runtime) -> None:
    """A batch of three gives, in order, the vectors three single calls give (padding hides nothing)."""
    batch = client(embed_fleet).embeddings.create(model="embed", input=TEXTS, encoding_format="float")
    assert [d.index for d in batch.data] == [0, 1, 2]
    for text, item in zip(TEXTS, batch.data, strict=True):
        expected = runtime.vector(runtime.ids(text))
        assert np.allclose(np.array(item.embedding, dtype=np.float32), expected, atol=1e-6)
    assert batch.usage.prompt_tokens == sum(len(runtime.ids(t)) for t in TEXTS)


def test_base64_decodes_to_the_float_vectors(embed_fleet: str) -> None:
    """encoding_format base64 is little-endian float32 of the same vector; the SDK's default decodes it too."""
    status, floats = post(embed_fleet, {"model": "embed", "input": TEXTS[0], "encoding_format": "float"})
    status_b64, encoded = post(embed_fleet, {"model": "embed", "input": TEXTS[0], "encoding_format": "base64"})
    assert status == status_b64 == 200
    raw = base64.b64decode(encoded["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == floats["data"][0]["embedding"]
    by_sdk = client(embed_fleet).embeddings.create(model="embed", input=TEXTS[0])  # asks base64, decodes it
    assert by_sdk.data[0].embedding == floats["data"][0]["embedding"]


def test_token_ids_embed_as_their_text(embed_fleet: str, runtime: Runtime) -> None:
    """A token-id list (and a list of them) gives the vector of the text those ids spell."""
    ids = runtime.ids(TEXTS[2])
    by_text = client(embed_fleet).embeddings.create(model="embed", input=TEXTS[2], encoding_format="float")
    by_ids = client(embed_fleet).embeddings.create(model="embed", input=[ids, ids], encoding_format="float")
    assert by_ids.data[0].embedding == by_text.data[0].embedding == by_ids.data[1].embedding


def test_dimensions_truncate_and_renormalise_where_the_model_declares_them(embed_fleet: str, runtime: Runtime) -> None:
    """dimensions=16 gives the first 16 values of the full vector, renormalised to unit length."""
    short = client(embed_fleet).embeddings.create(model="embed", input=TEXTS[0], dimensions=16, encoding_format="float")
    vector = np.array(short.data[0].embedding)
    full = runtime.vector(runtime.ids(TEXTS[0]))[:16]
    assert vector.shape == (16,) and np.allclose(vector, full / np.linalg.norm(full), atol=1e-6)
    status, body = post(embed_fleet, {"model": "embed", "input": "x", "dimensions": HIDDEN_SIZE + 1})
    assert (status, body["error"]["code"], body["error"]["param"]) == (400, "invalid_value", "dimensions")


def test_an_alias_routes_to_the_embedding_model(embed_fleet: str) -> None:
    """A client's stock model name (text-embedding-3-small) reaches the model through its alias."""
    reply = client(embed_fleet).embeddings.create(model="text-embedding-3-small", input="hi")
    assert reply.model == "text-embedding-3-small" and len(reply.data[0].embedding) == HIDDEN_SIZE


def test_a_chat_model_refuses_embeddings(embed_fleet: str) -> None:
    """Embeddings asked of the chat model are 400 model_not_embedding naming it and the embedding model."""
    with pytest.raises(openai.BadRequestError) as info:
        client(embed_fleet).embeddings.create(model="chat", input="hi")
    body: Any = info.value.body
    assert body["code"] == "model_not_embedding" and "'chat'" in body["message"] and "embed" in body["message"]


@pytest.mark.parametrize("api", ["chat", "completions", "messages", "responses"])
def test_the_embedding_model_refuses_chat_on_every_api(embed_fleet: str, api: str) -> None:
    """Every chat API naming the embedding model answers 400 model_not_chat; the chat model still chats."""
    error: Any
    if api == "messages":
        messages: Any = [{"role": "user", "content": "hi"}]
        with pytest.raises(anthropic.BadRequestError) as claude_info:
            anthropic.Anthropic(base_url=embed_fleet, api_key="local", max_retries=0).messages.create(
                model="embed", max_tokens=2, messages=messages
            )
        error = claude_info.value.body
        error = error["error"]
    else:
        with pytest.raises(openai.BadRequestError) as info:
            if api == "chat":
                client(embed_fleet).chat.completions.create(model="embed", messages=[{"role": "user", "content": "hi"}])
            elif api == "completions":
                client(embed_fleet).completions.create(model="embed", prompt="hi")
            else:
                client(embed_fleet).responses.create(model="embed", input="hi")
        error = info.value.body
    assert error["code"] == "model_not_chat" and "'embed'" in error["message"]
    reply = client(embed_fleet).chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content


def test_bad_inputs_are_refused_naming_the_field(embed_fleet: str) -> None:
    """An empty input, mixed kinds and an input past the model's window are 400s with their param."""
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"input": []}, "invalid_value", "input"),
        ({"input": ["a", ""]}, "invalid_value", "input.1"),
        ({"input": ["a", [1, 2]]}, "invalid_type", "input.1"),
        ({"input": [[1] * 5000]}, "context_length_exceeded", "input.0"),
        ({"input": "a", "encoding_format": "int8"}, "invalid_type", "encoding_format"),
        ({"input": "a", "truncate": True}, "unsupported_parameter", "truncate"),
    ]
    for body, code, param in cases:
        status, answer = post(embed_fleet, {"model": "embed", **body})
        assert (status, answer["error"]["code"], answer["error"]["param"]) == (400, code, param), body


def test_a_model_without_matryoshka_dimensions_refuses_shorter_vectors(tmp_path: Path) -> None:
    """The worker's embedder refuses dimensions below the model's own unless the model declares them."""
    from mlx_agent.runtime.entries.mlx_vlm_embed import Embedder, Refused

    embedder = Embedder(build_tiny_embed(tmp_path / "plain", matryoshka=False))
    assert embedder.check_dimensions(HIDDEN_SIZE) is None  # the model's own width: nothing to cut
    with pytest.raises(Refused) as info:
        embedder.check_dimensions(16)
    assert (info.value.code, info.value.param) == ("unsupported_parameter", "dimensions")


@pytest.mark.parametrize(("name", "kind"), [("embed", "an embedding model"), ("chat", "a chat model")])
def test_rerank_is_refused_by_every_model_of_the_fleet(embed_fleet: str, name: str, kind: str) -> None:
    """A Cohere-shaped rerank body is read and routed, then 400 model_not_reranker names the model and its kind."""
    body = {"model": name, "query": "primes", "documents": TEXTS, "top_n": 2, "return_documents": True}
    status, answer = post(embed_fleet, body, "/v1/rerank")
    error = answer["error"]
    assert (status, error["code"], error["param"]) == (400, "model_not_reranker", "model")
    assert f"'{name}' is {kind}" in error["message"] and "/v1/embeddings" in error["message"]
    status, answer = post(embed_fleet, {**body, "model": "nobody"}, "/v1/rerank")
    assert (status, answer["error"]["code"]) == (404, "model_not_found")
