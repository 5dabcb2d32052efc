"""A bounded fuzz of every endpoint's body against a real front and worker (hypothesis, fixed seed).

Bodies start valid and get fields replaced by hostile values: wrong types, huge and negative numbers,
NaN and infinities, lone surrogates, deep nesting, unknown fields; raw bodies that are not JSON at all. After
every case: a 2xx with the endpoint's reply or a 4xx with the error body of the endpoint's API (OpenAI's
``{"error": {...}}``, Anthropic's ``{"type": "error", ...}`` on /v1/messages), no hang past the request
timeout, and a normal request is answered. At the end the worker is the process the front first started
(nothing crashed or restarted). The counts are printed.

The same front's worker is then fuzzed on its own Unix socket with the same bounds, as a client that got
past the front (or a broken front) would: hostile fields and raw bodies to its two endpoints, and hostile
framing (Content-Length missing, negative, past the cap, short; odd methods and request lines).
"""

from __future__ import annotations

import http.client
import json
import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlx_agent.wire import MAX_BODY_BYTES, WORKER_MODEL_NAME
from tests.e2e.front_support import HI, Front, running_front

pytestmark = pytest.mark.e2e

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # a fixed seed: the same cases every run
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SEEN: Counter[str] = Counter()

BASES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "tiny", "messages": HI, "max_tokens": 3},
    "/v1/completions": {"model": "tiny", "prompt": "Once", "max_tokens": 3},
    "/v1/messages": {"model": "tiny", "messages": HI, "max_tokens": 3},
    "/v1/messages/count_tokens": {"model": "tiny", "messages": HI},
    "/v1/responses": {"model": "tiny", "input": "hi", "max_output_tokens": 3},
}
FIELDS: dict[str, list[str]] = {
    "/v1/chat/completions": [
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "stop",
        "n",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "repetition_context_size",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "response_format",
        "parallel_tool_calls",
        "chat_template_kwargs",
        "reasoning_effort",
        "reasoning_budget",
        "hedge_limit",
        "repeat_limit",
        "xtc_probability",
        "num_draft_tokens",
        "x-unknown",
    ],
    "/v1/completions": ["model", "prompt", "max_tokens", "temperature", "seed", "stop", "logit_bias", "stream"],
    "/v1/messages": [
        "model",
        "messages",
        "max_tokens",
        "system",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "stream",
        "tools",
        "tool_choice",
        "thinking",
        "metadata",
        "output_config",
        "context_management",
        "service_tier",
    ],
    "/v1/messages/count_tokens": ["model", "messages", "system", "tools", "thinking"],
    "/v1/responses": [
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "include",
        "text",
        "reasoning",
        "store",
        "previous_response_id",
        "parallel_tool_calls",
        "stream",
        "truncation",
        "metadata",
    ],
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 2**64 + 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(), max_size=12),  # lone surrogates included
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=12,
)
deep = st.integers(min_value=60, max_value=1200).map(lambda n: json.loads("[" * min(n, 900) + "]" * min(n, 900)))


@pytest.fixture(scope="module")
def front(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    """Start one eager front on the tiny model for the whole fuzz; print what the cases got."""
    with running_front(tiny_model, tmp_path_factory.mktemp("fuzz-home")) as started:
        yield started
        model = started.models()
        print(
            f"\nfuzz: {sum(SEEN.values())} requests, {dict(sorted(SEEN.items()))}; worker restarts {model['loads'] - 1}"
        )


# What a 2xx answer of each endpoint is, when it is not a stream: one key and its value.
REPLIES: dict[str, tuple[str, Any]] = {
    "/v1/chat/completions": ("object", "chat.completion"),
    "/v1/completions": ("object", "text_completion"),
    "/v1/messages": ("type", "message"),
    "/v1/responses": ("object", "response"),
}


def post(front: Front, path: str, raw: bytes) -> tuple[int, str, bytes]:
    """Send one body; return the status, the content type and the whole answer (a stream is read to its end)."""
    conn = http.client.HTTPConnection("127.0.0.1", front.port, timeout=60)
    try:
        headers = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
        conn.request("POST", path, body=raw, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.getheader("Content-Type") or "", answer.read()
    finally:
        conn.close()


def api_error(path: str, answer: Any) -> bool:
    """Say whether ``answer`` is an error document of ``path``'s API, with a message."""
    if path.startswith("/v1/messages"):  # Anthropic: {"type": "error", "error": {"type", "message"}}
        inner = answer.get("error") if isinstance(answer, dict) and answer.get("type") == "error" else None
    else:  # OpenAI: {"error": {"message", "type", "param", "code"}}
        inner = answer.get("error") if isinstance(answer, dict) else None
        if isinstance(inner, dict) and not {"param", "code"} <= set(inner):
            return False
    return isinstance(inner, dict) and isinstance(inner.get("type"), str) and bool(inner.get("message"))


def reply(path: str, content_type: str, text: bytes) -> bool:
    """Say whether a 2xx answer is the endpoint's reply: its JSON document, or a stream of events."""
    if content_type.startswith("text/event-stream"):
        return text.startswith((b"data: ", b"event: "))
    answer = json.loads(text)
    if path == "/v1/messages/count_tokens":
        return isinstance(answer.get("input_tokens"), int)
    key, value = REPLIES[path]
    return bool(answer.get(key) == value)


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


WORKER_FUZZ = settings(FUZZ, max_examples=60)
WORKER_BASES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": WORKER_MODEL_NAME, "messages": HI, "max_tokens": 3},
    "/v1/completions": {"model": WORKER_MODEL_NAME, "prompt": "Once", "max_tokens": 3},
}


class UnixConnection(http.client.HTTPConnection):
    """http.client over the worker's Unix socket."""

    def __init__(self, path: str, timeout: float = 60) -> None:
        super().__init__("worker", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        """Connect to the socket instead of a TCP address."""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def worker_socket(front: Front) -> str:
    """Return the Unix socket the front's worker listens on."""
    worker = front.models()["worker"]
    assert worker["transport"] == "unix", worker
    return str(worker["address"])


def worker_exchange(path: str, raw: bytes, method: str = "POST") -> tuple[int, str, bytes]:
    """Send raw request bytes to the worker's socket; return the status, content type and body (to the end)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(path)
        sock.sendall(raw)
        with sock.makefile("rb") as stream:
            answer = http.client.HTTPResponse(sock, method=method)  # a HEAD answer has no body to read
            answer.fp = stream
            answer.begin()
            return answer.status, answer.getheader("Content-Type") or "", answer.read()


def worker_healthy(path: str) -> bool:
    """Say whether the worker answers a normal chat on its socket."""
    body = json.dumps(WORKER_BASES["/v1/chat/completions"]).encode()
    return worker_attempt_raw(path, "/v1/chat/completions", body)[0] == 200


def worker_attempt_raw(path: str, endpoint: str, raw: bytes) -> tuple[int, str, bytes]:
    """POST ``raw`` to ``endpoint`` on the worker's socket."""
    conn = UnixConnection(path)
    try:
        conn.request("POST", endpoint, body=raw, headers={"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, answer.getheader("Content-Type") or "", answer.read()
    finally:
        conn.close()


def worker_attempt(path: str, endpoint: str, answer: tuple[int, str, bytes], case: object) -> None:
    """Check one worker answer: a 2xx reply or a 4xx OpenAI error, never a 5xx; then a normal chat is served."""
    status, content_type, text = answer
    SEEN[f"worker {status // 100}xx"] += 1
    if 200 <= status < 300:
        assert reply(endpoint, content_type, text), (case, status, text[:300])
    else:
        assert 400 <= status < 500, (case, status, text[:300])
        assert content_type.startswith("application/json") and api_error(endpoint, json.loads(text)), (case, text)
    assert worker_healthy(path), case


@pytest.mark.parametrize("endpoint", list(WORKER_BASES))
@WORKER_FUZZ
@given(data=st.data())
def test_hostile_fields_never_break_the_worker_socket(front: Front, endpoint: str, data: st.DataObject) -> None:
    """Straight to the worker's socket, one to three fields replaced by anything: a reply or a 4xx, never a 5xx."""
    path = worker_socket(front)
    body = dict(WORKER_BASES[endpoint])
    names = data.draw(st.lists(st.sampled_from(FIELDS[endpoint]), min_size=1, max_size=3, unique=True))
    for name in names:
        body[name] = data.draw(st.one_of(values, deep) if name == "messages" else values)
    if body.get("stream") is True:
        body["max_tokens"] = 3
    raw = json.dumps(body, allow_nan=True).encode()
    worker_attempt(path, endpoint, worker_attempt_raw(path, endpoint, raw), raw[:300])


@WORKER_FUZZ
@given(raw=st.one_of(st.binary(max_size=200), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_bodies_that_are_not_json_are_4xx_on_the_worker_socket(front: Front, raw: bytes) -> None:
    """Arbitrary bytes as a chat body on the worker's socket: a 4xx OpenAI error, and the worker serves on."""
    path = worker_socket(front)
    status, content_type, text = worker_attempt_raw(path, "/v1/chat/completions", raw)
    assert 400 <= status < 500, (raw, status, text[:300])
    worker_attempt(path, "/v1/chat/completions", (status, content_type, text), raw)


LENGTHS = st.sampled_from(["", "-1", "abc", "1e3", " 12", "99999999999999999999", str(MAX_BODY_BYTES + 1), "5"])
METHODS = st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "HEAD", "BREW", "post"])
TARGETS = st.sampled_from(["/v1/chat/completions", "/v1/completions", "/health", "/v1/models", "/x", "*", ""])


@WORKER_FUZZ
@given(method=METHODS, target=TARGETS, length=LENGTHS, version=st.sampled_from(["HTTP/1.0", "HTTP/1.1", "HTTP/9"]))
def test_hostile_framing_never_breaks_the_worker_socket(
    front: Front, method: str, target: str, length: str, version: str
) -> None:
    """Odd methods, targets, versions and Content-Lengths (short bodies included): never a 5xx, never a hang."""
    path = worker_socket(front)
    head = f"{method} {target} {version}\r\nHost: worker\r\nContent-Type: application/json\r\n"
    if length:
        head += f"Content-Length: {length}\r\n"
    raw = head.encode() + b"\r\n" + b'{"messages": []}'  # shorter than most lengths: a body cut short
    status, content_type, text = worker_exchange(path, raw, method)
    SEEN[f"worker {status // 100}xx"] += 1
    assert status < 500, (raw, status, text[:300])
    if status >= 400 and method != "HEAD":
        assert content_type.startswith("application/json") and api_error("/", json.loads(text)), (raw, text)
    assert worker_healthy(path), raw


def test_the_worker_never_restarted(front: Front) -> None:
    """After the fuzz the worker is the first one: nothing crashed it."""
    model = front.models()
    assert (model["worker"]["pid"], model["loads"], model["worker_exits"]) == (front.first_worker, 1, 0)
