"""Ollama's ``/api/embed`` and ``/api/embeddings`` through the official client, on a reviewed embed_fleet.

The CLI previews and confirms a models file naming the tiny chat model and the tiny embedding model (the
``mlx-vlm-embed`` runtime, as tests/e2e/test_embeddings.py serves it), and the ``ollama`` client asks for vectors;
they are the ones ``/v1/embeddings`` gives for the same inputs (which that test holds to mlx-vlm's own output).
The fleet's real plan also shows what each model refuses: chat of the embedding model, images of the text one.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

import ollama
import pytest

from tests.fixtures.tiny_embed import HIDDEN_SIZE

pytestmark = pytest.mark.e2e
TEXTS = ["hello world", "primes"]


def openai_vectors(url: str, inputs: list[str], model: str = "embed") -> Any:
    """Return the front's /v1/embeddings answer (floats) for ``inputs`` from ``model``."""
    body = json.dumps({"model": model, "input": inputs, "encoding_format": "float"}).encode()
    request = urllib.request.Request(url + "/v1/embeddings", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as reply:
        return json.loads(reply.read())


def test_embed_gives_the_vectors_of_v1_embeddings(embed_fleet: str) -> None:
    """One vector per input, in order, equal to /v1/embeddings'; the tokens read and real durations."""
    client = ollama.Client(host=embed_fleet, timeout=300)
    reply = client.embed(model="embed", input=TEXTS)
    expected = openai_vectors(embed_fleet, TEXTS)
    assert [list(v) for v in reply.embeddings] == [d["embedding"] for d in expected["data"]]
    assert len(reply.embeddings[0]) == HIDDEN_SIZE
    assert reply.prompt_eval_count == expected["usage"]["prompt_tokens"]
    assert reply.total_duration and reply.total_duration > 0 and reply.model == "embed"
    single = client.embeddings(model="embed", prompt=TEXTS[1])
    assert list(single.embedding) == expected["data"][1]["embedding"]


def test_ollamas_latest_tag_embeds_on_both_apis(embed_fleet: str) -> None:
    """``embed:latest`` gives embed's vectors on /api/embed and on /v1/embeddings, named as the client named it."""
    expected = openai_vectors(embed_fleet, TEXTS)
    tagged = ollama.Client(host=embed_fleet, timeout=300).embed(model="embed:latest", input=TEXTS)
    assert [list(v) for v in tagged.embeddings] == [d["embedding"] for d in expected["data"]]
    assert tagged.model == "embed:latest"
    openai = openai_vectors(embed_fleet, TEXTS, "embed:latest")
    assert (openai["data"], openai["model"]) == (expected["data"], "embed:latest")


def test_the_fleet_says_which_model_embeds_and_refuses_the_wrong_one(embed_fleet: str) -> None:
    """Show names the embedding model; embed asked of a chat model, chat of it, images of a text model: clear 400s."""
    client = ollama.Client(host=embed_fleet, timeout=300)
    assert client.show("embed").capabilities == ["embedding"]
    assert "completion" in (client.show("chat").capabilities or [])
    with pytest.raises(ollama.ResponseError) as info:
        client.embed(model="chat", input="hi")
    assert info.value.status_code == 400 and "chat model" in info.value.error
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="embed", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 400 and "embedding model" in info.value.error
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(24)).decode()
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="chat", messages=[{"role": "user", "content": "what is it?", "images": [png]}])
    assert info.value.status_code == 400 and "reads text only" in info.value.error
