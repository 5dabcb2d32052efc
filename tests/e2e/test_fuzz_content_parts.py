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

from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.e2e.content_fuzz import APIS, Traps, attempt, bodies, print_codes
from tests.e2e.front_support import Front
from tests.e2e.fuzz_support import BASES, FIELDS, FUZZ, assert_first_worker, deep, fuzz_front, values
from tests.fixtures.tiny_vlm import build_tiny_vlm

pytestmark = pytest.mark.e2e

SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    """Start one eager front on the tiny vision model for the whole fuzz; print what the cases got."""
    model = build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "tiny-qwen2-vl")
    with fuzz_front(model, tmp_path_factory.mktemp("fuzz-home"), SEEN, "--runtime", "mlx-vlm") as started:
        yield started
    print_codes("vision")


@pytest.fixture(scope="module")
def traps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traps]:
    """Yield a loopback listener and a 0600 file of nobody's, watched for the whole fuzz."""
    watched = Traps(tmp_path_factory.mktemp("secret"))
    try:
        yield watched
    finally:
        watched.close()


@pytest.mark.parametrize("path", APIS)
@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_hostile_content_parts_never_reach_a_url_a_file_or_a_5xx(
    front: Front, traps: Traps, path: str, data: st.DataObject
) -> None:
    """Any part of any type with any fields: a reply or the API's 4xx; nothing fetched or opened; no 5xx but 501/503."""
    body = data.draw(bodies(path, traps.listener, traps.secret.path))
    attempt(front, traps, "vision", path, body, SEEN, front.healthy)


@pytest.mark.parametrize("path", list(BASES))
@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_hostile_fields_never_break_the_vision_server(
    front: Front, traps: Traps, path: str, data: st.DataObject
) -> None:
    """The request fuzz's field cases on the vision model: one to three fields of a valid body replaced by anything."""
    body = dict(BASES[path])
    names = data.draw(st.lists(st.sampled_from(FIELDS[path]), min_size=1, max_size=3, unique=True))
    for name in names:
        body[name] = data.draw(st.one_of(values, deep) if name in ("messages", "tools", "input") else values)
    if body.get("stream") is True:
        body["max_tokens"] = 3
    attempt(front, traps, "vision", path, body, SEEN, front.healthy)


def test_the_vision_worker_never_restarted(front: Front) -> None:
    """After the fuzz the worker is the first one: no hostile part crashed it."""
    assert_first_worker(front)
