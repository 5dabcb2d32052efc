"""The content fuzz on a text model and on an embedding model: every API, every part type and field, hostile values.

One front serves the tiny text model (mlx_lm: the session's ``hostile_front``, shared with the other hostile-request
files), another the tiny embedding model (``mlx-vlm-embed``, for the whole module). Every case is a request of one
of the APIs the front serves (chat completions streamed and not, completions, Messages and its token count,
Responses, Ollama's ``/api/chat``, ``/api/generate``, ``/api/embed`` and ``/api/embeddings``, ``/v1/embeddings``)
whose content holds hostile parts (``content_fuzz``): URLs of every scheme on a loopback listener, paths and
``file://`` URLs of a 0600 file of ``nobody``'s, data of sound and undecodable images, huge, deep and odd JSON.
After every case: a 2xx with the endpoint's reply or its API's error that is a 4xx or a documented 501/503; no 2xx
where the kind must refuse (an image or any media part on the text model, media anywhere, chat of the embedding
model, embeddings of the text model); no connection to the listener, no open of the file, and a normal request
answered. At the end each worker is the one its front first started (the same pid, one load, no exit). The counts
are printed; the vision model's fuzz is ``test_fuzz_content_parts.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.e2e.content_checks import attempt, attempt_every_part, print_codes
from tests.e2e.content_fuzz import APIS, bodies
from tests.e2e.front_support import Front
from tests.e2e.fuzz_support import FUZZ, assert_first_worker, fuzz_front, print_seen, values
from tests.media_traps import Traps

pytestmark = pytest.mark.e2e

TEXT_SEEN: Counter[str] = Counter()
EMBED_SEEN: Counter[str] = Counter()
CASES = settings(FUZZ, max_examples=30)  # per API: ten APIs, about 300 requests per kind


@pytest.fixture(scope="module")
def text_front(hostile_front: Front) -> Iterator[Front]:
    """Share the hostile eager front on the tiny text model (tests/e2e/conftest.py); print what its cases got."""
    yield hostile_front
    print_seen(hostile_front, TEXT_SEEN)
    print_codes("text")


@pytest.fixture(scope="module")
def embed_front(tmp_path_factory: pytest.TempPathFactory, embed_model: Path) -> Iterator[Front]:
    """Start one eager front on the tiny embedding model for the whole module; print what its cases got."""
    home = tmp_path_factory.mktemp("embed-home")
    with fuzz_front(embed_model, home, EMBED_SEEN, "--runtime", "mlx-vlm-embed") as started:
        yield started
    print_codes("embedding")


def embeds(front: Front) -> bool:
    """Say whether a normal embeddings request is answered."""
    return front.send("POST", "/v1/embeddings", {"model": "tiny", "input": "hi"})[0] == 200


@pytest.mark.parametrize("path", APIS)
@CASES
@given(data=st.data())
def test_hostile_content_on_a_text_model(text_front: Front, traps: Traps, path: str, data: st.DataObject) -> None:
    """Any part on any API of a text model: a reply or the API's 4xx, no image or media taken, nothing fetched."""
    body = data.draw(bodies(path, traps.listener, traps.secret.path))
    attempt(text_front, traps, "text", path, body, TEXT_SEEN, text_front.healthy)


@pytest.mark.parametrize("path", APIS)
@CASES
@given(data=st.data())
def test_hostile_content_on_an_embedding_model(
    embed_front: Front, traps: Traps, path: str, data: st.DataObject
) -> None:
    """Any part on any API of an embedding model: vectors or the API's 4xx, never a chat, nothing fetched."""
    body = data.draw(bodies(path, traps.listener, traps.secret.path))
    attempt(embed_front, traps, "embedding", path, body, EMBED_SEEN, lambda: embeds(embed_front))


# mlx_lm's own chat fields that the request fuzz's list leaves out (chat completions passes undeclared ones on),
# and the names a chat template's keyword arguments may try to replace.
LM_FIELDS = ("role_mapping", "xtc_threshold", "presence_context_size", "frequency_context_size", "chat_template_kwargs")
TEMPLATE_KWARGS = ("messages", "tools", "add_generation_prompt", "enable_thinking", "bos_token", "x-unknown")


@pytest.mark.parametrize("path", APIS)
def test_every_part_type_on_a_text_model(text_front: Front, traps: Traps, path: str) -> None:
    """Every part type as its API writes it, naming a URL or a path: media, images and documents refused."""
    attempt_every_part(text_front, traps, "text", path, TEXT_SEEN, text_front.healthy)


@pytest.mark.parametrize("path", APIS)
def test_every_part_type_on_an_embedding_model(embed_front: Front, traps: Traps, path: str) -> None:
    """Every part type as its API writes it, naming a URL or a path, on every API of an embedding model: refused."""
    attempt_every_part(embed_front, traps, "embedding", path, EMBED_SEEN, lambda: embeds(embed_front))


@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_the_text_workers_own_fields_never_get_a_5xx(text_front: Front, traps: Traps, data: st.DataObject) -> None:
    """mlx_lm's own chat fields and a template's keyword arguments hold anything: a reply or the API's 4xx."""
    body: dict[str, object] = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    for name in data.draw(st.lists(st.sampled_from(LM_FIELDS), min_size=1, max_size=3, unique=True)):
        kwargs = st.dictionaries(st.sampled_from(TEMPLATE_KWARGS), values, max_size=3)
        body[name] = data.draw(st.one_of(kwargs, values) if name == "chat_template_kwargs" else values)
    body["stream"] = data.draw(st.booleans())
    attempt(text_front, traps, "text", "/v1/chat/completions", body, TEXT_SEEN, text_front.healthy)


def test_the_text_worker_never_restarted(text_front: Front) -> None:
    """After the fuzz the text model's worker is the first one: no hostile part crashed it."""
    assert_first_worker(text_front)


def test_the_embedding_worker_never_restarted(embed_front: Front) -> None:
    """After the fuzz the embedding model's worker is the first one: no hostile part crashed it."""
    assert_first_worker(embed_front)
