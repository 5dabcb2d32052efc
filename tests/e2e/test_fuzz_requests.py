"""A bounded fuzz of every endpoint's body against a real front and worker (hypothesis, fixed seed).

Bodies start valid and get fields replaced by hostile values: wrong types, huge and negative numbers,
NaN and infinities, lone surrogates, deep nesting, unknown fields; raw bodies that are not JSON at all. After
every case: a 2xx with the endpoint's reply or a 4xx with the error body of the endpoint's API (OpenAI's
``{"error": {...}}``, Anthropic's ``{"type": "error", ...}`` on /v1/messages), no hang past the request
timeout, and a normal request is answered. At the end the worker is the process the front first started
(nothing crashed or restarted). The counts are printed. The worker's own socket is fuzzed in
``test_fuzz_worker_socket.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.e2e.front_support import Front
from tests.e2e.fuzz_support import (
    BASES,
    FIELDS,
    FUZZ,
    api_error,
    assert_first_worker,
    deep,
    post,
    print_seen,
    reply,
    values,
)

pytestmark = pytest.mark.e2e

SEEN: Counter[str] = Counter()


@pytest.fixture(scope="module")
def front(hostile_front: Front) -> Iterator[Front]:
    """Share the hostile eager front on the tiny model (tests/e2e/conftest.py) for the whole fuzz; print its counts."""
    yield hostile_front
    print_seen(hostile_front, SEEN)


def attempt(front: Front, path: str, raw: bytes, only_400: bool = False) -> None:
    """Send one hostile body: a 2xx reply or a 4xx error of the API (400 only, if asked); then a normal answer."""
    status, content_type, text = post(front, path, raw)
    SEEN[f"{status // 100}xx"] += 1
    case = (path, status, raw[:300], text[:300])
    if 200 <= status < 300 and not only_400:
        assert reply(path, content_type, text), case
    else:
        assert status == 400 if only_400 else 400 <= status < 500, case
        assert content_type.startswith("application/json") and api_error(path, json.loads(text)), case
    assert front.healthy(), (path, raw[:300])


@pytest.mark.parametrize("path", list(BASES))
@FUZZ
@given(data=st.data())
def test_hostile_fields_never_break_the_server(front: Front, path: str, data: st.DataObject) -> None:
    """One to three fields of a valid body replaced by anything: the endpoint's reply or its API's 4xx error."""
    body = dict(BASES[path])
    names = data.draw(st.lists(st.sampled_from(FIELDS[path]), min_size=1, max_size=3, unique=True))
    for name in names:
        body[name] = data.draw(st.one_of(values, deep) if name in ("messages", "tools", "input") else values)
    if body.get("stream") is True:
        body["max_tokens"] = 3  # keep a valid stream short; its reply is read whole
    attempt(front, path, json.dumps(body, allow_nan=True).encode())


@FUZZ
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_bodies_that_are_not_json_are_400(front: Front, raw: bytes) -> None:
    """Arbitrary bytes (bad UTF-8, truncated JSON, surrogates) to chat completions are a 400 with OpenAI's error."""
    attempt(front, "/v1/chat/completions", raw, only_400=True)


def test_the_worker_never_restarted(front: Front) -> None:
    """After the fuzz the worker is the first one: nothing crashed it."""
    assert_first_worker(front)
