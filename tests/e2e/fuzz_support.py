"""What both fuzz files share: the bounds, the hostile values, the bodies they start from, and the reply checks.

``tests/e2e/test_fuzz_requests.py`` fuzzes the front's endpoints (on ``hostile_front``, which it shares with
``test_hostile_requests.py``), ``tests/e2e/test_fuzz_worker_socket.py`` the worker's own Unix socket (the tiny
worker ``test_worker_socket.py`` shares); two files, so two test workers run them side by side. After each file
the worker is still the process first started.
"""

from __future__ import annotations

import http.client
import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.e2e.front_support import HI, Front, running_front

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,  # a fixed seed: the same cases every run
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

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


# A case that drops or nulls the reply limit, or asks a large one, would otherwise generate the context's whole
# room (~2,000 tokens, seconds each): the front's default and ceiling keep every reply as short as the bases'.
# The hostile values still reach the same checks; a large limit is lowered to the ceiling, as it is for a user.
REPLY_LIMITS = ("--max-tokens", "3", "--max-tokens-ceiling", "8")


@contextmanager
def fuzz_front(tiny_model: Path, home: Path, seen: Counter[str], *options: str) -> Iterator[Front]:
    """Start one eager front on the tiny model for a whole fuzz file (short replies); print what its cases got."""
    with running_front(tiny_model, home, *REPLY_LIMITS, *options) as started:
        yield started
        print_seen(started, seen)


def print_seen(front: Front, seen: Counter[str]) -> None:
    """Print what a fuzz file's cases got, and how often the front's worker was restarted."""
    model = front.models()
    print(f"\nfuzz: {sum(seen.values())} requests, {dict(sorted(seen.items()))}; worker restarts {model['loads'] - 1}")


def assert_first_worker(front: Front) -> None:
    """Assert the front's worker is the first one it started: nothing crashed or restarted it."""
    model = front.models()
    assert (model["worker"]["pid"], model["loads"], model["worker_exits"]) == (front.first_worker, 1, 0)


# What a 2xx answer of each endpoint is, when it is not a stream: one key and its value.
REPLIES: dict[str, tuple[str, Any]] = {
    "/v1/chat/completions": ("object", "chat.completion"),
    "/v1/completions": ("object", "text_completion"),
    "/v1/messages": ("type", "message"),
    "/v1/responses": ("object", "response"),
    "/api/chat": ("done", True),
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
    if path.startswith("/api/"):  # Ollama: {"error": "message", "code"}
        return isinstance(answer, dict) and isinstance(answer.get("error"), str) and bool(answer["error"])
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
    if content_type.startswith("application/x-ndjson"):  # Ollama's stream: one JSON object a line, the last done
        return bool(json.loads(text.splitlines()[-1]).get("done"))
    answer = json.loads(text)
    if path == "/v1/messages/count_tokens":
        return isinstance(answer.get("input_tokens"), int)
    key, value = REPLIES[path]
    return bool(answer.get(key) == value)
