"""A bounded fuzz of every content-part type and field of every API against a real front over a vision model.

The front serves the tiny Qwen2-VL model through the wrapped mlx-vlm worker. Every case is a request of chat
completions, Messages, Responses or ``/api/chat`` whose content holds hostile parts (``content_fuzz``): every part
type and field, naming a loopback listener, a 0600 file of ``nobody``'s, or data of sound and undecodable images;
then the request fuzz's field cases (``fuzz_support``: every field of every endpoint) on this vision model.
After every case: a 2xx with the endpoint's reply or a 4xx with its API's error (never a 5xx but the documented
501 and 503), no connection to the listener, no open of the file, and a normal request answered. At the end the
worker is the one the front first started. The counts are printed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.e2e.content_fuzz import bodies
from tests.e2e.front_support import Front
from tests.e2e.fuzz_support import (
    BASES,
    FIELDS,
    FUZZ,
    api_error,
    assert_first_worker,
    deep,
    fuzz_front,
    post,
    reply,
    values,
)
from tests.fixtures.tiny_vlm import build_tiny_vlm
from tests.media_traps import Listener, SecretFile

pytestmark = pytest.mark.e2e

SEEN: Counter[str] = Counter()
APIS = ("/v1/chat/completions", "/v1/messages", "/v1/responses", "/api/chat")
DOCUMENTED_5XX = (501, 503)


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    """Start one eager front on the tiny vision model for the whole fuzz; print what the cases got."""
    model = build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-qwen2-vl")
    with fuzz_front(model, tmp_path_factory.mktemp("fuzz-home"), SEEN, "--runtime", "mlx-vlm") as started:
        yield started


@pytest.fixture(scope="module")
def traps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Listener, SecretFile]]:
    """Yield a loopback listener and a 0600 file of nobody's, watched for the whole fuzz."""
    listener, secret = Listener(), SecretFile(tmp_path_factory.mktemp("secret"))
    try:
        yield listener, secret
    finally:
        listener.close()
        secret.close()


def attempt(front: Front, traps: tuple[Listener, SecretFile], path: str, body: dict[str, object]) -> None:
    """Send one hostile body; check the answer, the listener, the file and a normal request after it."""
    listener, secret = traps
    raw = json.dumps(body, allow_nan=True)
    status, content_type, text = post(front, path, raw.encode())
    SEEN[f"{status // 100}xx"] += 1
    case = (path, status, raw[:400], text[:300])
    if 200 <= status < 300:
        assert reply(path, content_type, text), case
    else:
        assert 400 <= status < 500 or status in DOCUMENTED_5XX, case
        assert content_type.startswith("application/json") and api_error(path, json.loads(text)), case
    assert listener.connections == 0, case
    assert not secret.touched(), case
    assert front.healthy(), case


@pytest.mark.parametrize("path", APIS)
@settings(FUZZ, max_examples=80)
@given(data=st.data())
def test_hostile_content_parts_never_reach_a_url_a_file_or_a_5xx(
    front: Front, traps: tuple[Listener, SecretFile], path: str, data: st.DataObject
) -> None:
    """Any part of any type with any fields: a reply or the API's 4xx; nothing fetched or opened; no 5xx but 501/503."""
    attempt(front, traps, path, data.draw(bodies(path, traps[0], traps[1].path)))


@pytest.mark.parametrize("path", list(BASES))
@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_hostile_fields_never_break_the_vision_server(
    front: Front, traps: tuple[Listener, SecretFile], path: str, data: st.DataObject
) -> None:
    """The request fuzz's field cases on the vision model: one to three fields of a valid body replaced by anything."""
    body = dict(BASES[path])
    names = data.draw(st.lists(st.sampled_from(FIELDS[path]), min_size=1, max_size=3, unique=True))
    for name in names:
        body[name] = data.draw(st.one_of(values, deep) if name in ("messages", "tools", "input") else values)
    if body.get("stream") is True:
        body["max_tokens"] = 3
    attempt(front, traps, path, body)


def test_the_vision_worker_never_restarted(front: Front) -> None:
    """After the fuzz the worker is the first one: no hostile part crashed it."""
    assert_first_worker(front)
