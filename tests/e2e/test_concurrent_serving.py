"""Concurrent requests through the real wrapped worker: a short request during a long prefill, lookup in a batch.

The worker's prefill runs in chunks of 64 tokens here (``--prefill-step-size``), so the tiny model's long prompt
takes many steps. A streamed reply shows its prefill as ``: keepalive done/total`` comments, and the tests read
the order of those and of the first tokens, never their times. Replies are compared with bare ``mlx_lm.server``
(unpatched, each request alone) and, for lookup, with the plain wrapped worker.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.wire import PROMPT_LOOKUP_FLAG
from tests.e2e.test_prompt_lookup_server import CHATS, CODE, LOOKUP_LINE
from tests.e2e.test_wrapped_support import Server, running

pytestmark = pytest.mark.e2e

STEP = ("--prefill-step-size", "64")
LONG = " ".join(f"item{i % 89} is number {i}," for i in range(160))  # about 1,300 tokens: twenty chunks
SHORT = "Hello! How are you today?"
JOINED = re.compile(r"mlx-agent: (\S+) joins the batch without prompt lookup \((\d+) other requests active")


@pytest.fixture(scope="module")
def servers(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    """Start bare mlx_lm, the wrapped worker, and the wrapped worker with prompt lookup, on the tiny model."""
    logs = tmp_path_factory.mktemp("concurrent")
    with (
        running(tiny_model, logs, *STEP, bare=True) as bare,
        running(tiny_model, logs, *STEP) as wrapped,
        running(tiny_model, logs, PROMPT_LOOKUP_FLAG) as lookup,
    ):
        yield {"bare": bare, "wrapped": wrapped, "lookup": lookup}


class Events:
    """What the streams showed, in the order they showed it (thread-safe)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def add(self, name: str, kind: str) -> None:
        """Record that stream ``name`` showed ``kind`` ("keepalive", "first" token or "end")."""
        with self._lock:
            self.seen.append((name, kind))

    def index(self, name: str, kind: str) -> int:
        """Return where stream ``name`` first showed ``kind``."""
        return self.seen.index((name, kind))


def stream(
    server: Server,
    content: str,
    *,
    name: str = "",
    events: Events | None = None,
    prefilling: threading.Event | None = None,
    max_tokens: int = 24,
) -> str:
    """Stream one greedy chat reply and return its text; record its events, and set ``prefilling`` mid-prefill."""
    body = {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
    }
    request = urllib.request.Request(
        f"{server.url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    text, keepalives = "", 0
    with urllib.request.urlopen(request, timeout=600) as answer:
        for raw in answer:
            line = raw.decode().strip()
            if line.startswith(": keepalive"):
                keepalives += 1
                if events is not None:
                    events.add(name, "keepalive")
                if prefilling is not None and keepalives == 2:  # the long prompt's second chunk is done
                    prefilling.set()
                continue
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                piece = choice.get("delta", {}).get("content") or ""
                if piece and not text and events is not None:
                    events.add(name, "first")
                text += piece
    if events is not None:
        events.add(name, "end")
    return text


def test_a_short_request_decodes_while_a_long_prompt_prefills(servers: dict[str, Server]) -> None:
    """A short request sent mid-prefill gets its first token before the long one, and both replies are native."""
    events, prefilling = Events(), threading.Event()
    replies: dict[str, str] = {}

    def long_request() -> None:
        replies["long"] = stream(servers["wrapped"], LONG, name="long", events=events, prefilling=prefilling)

    worker = threading.Thread(target=long_request)
    worker.start()
    assert prefilling.wait(timeout=300), "the long prompt never reported its prefill"
    replies["short"] = stream(servers["wrapped"], SHORT, name="short", events=events)
    worker.join(timeout=600)
    assert events.index("short", "first") < events.index("long", "first")
    # The long prompt was still prefilling after the short reply's first token: the two were interleaved.
    after_short = events.seen[events.index("short", "first") :]
    assert ("long", "keepalive") in after_short
    assert replies == {"long": stream(servers["bare"], LONG), "short": stream(servers["bare"], SHORT)}


def concurrent(server: Server, prompts: list[str], max_tokens: int) -> list[tuple[str, str]]:
    """Send ``prompts`` at once (non-streaming, greedy); return each reply's id and text, in prompt order."""
    start = threading.Barrier(len(prompts))
    replies: list[tuple[str, str]] = [("", "")] * len(prompts)

    def send(index: int) -> None:
        client: Any = server.client(timeout=600)
        start.wait()
        reply = client.chat.completions.create(
            model="default_model",
            messages=[{"role": "user", "content": prompts[index]}],
            max_tokens=max_tokens,
            temperature=0.0,
        )
        replies[index] = (reply.id, reply.choices[0].message.content or "")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    return replies


def lookup_lines(server: Server, ident: str) -> list[tuple[str, ...]]:
    """Return the lookup lines of reply ``ident``, waiting a while for one (it follows the reply's last token)."""
    for _ in range(300):
        lines = [found for found in LOOKUP_LINE.findall(server.log()) if found[0] == ident]
        if lines:
            return lines
        time.sleep(0.1)
    return []


def test_lookup_requests_sent_together_are_batched_with_native_replies(servers: dict[str, Server]) -> None:
    """Four greedy requests at once under --prompt-lookup: each is lookup's or the batch's, all as without lookup."""
    # Long enough prompts that the others are queued while the first one is still prefilling.
    prompts = [f"Edit number {i}: rename Stack to Pile.\n{CODE}\n{LONG[: 400 * (i + 1)]}" for i in range(4)]
    with_lookup = concurrent(servers["lookup"], prompts, 48)
    without = concurrent(servers["wrapped"], prompts, 48)
    assert [text for _, text in with_lookup] == [text for _, text in without]
    ids = [ident for ident, _ in with_lookup]
    log = servers["lookup"].log()
    lines = [(ident, int(others)) for ident, others in JOINED.findall(log) if ident in ids]
    joined = dict(lines)
    assert len(joined) == len(lines), "a request was reported twice"
    alone = {found[0] for found in LOOKUP_LINE.findall(log) if found[0] in ids}
    assert joined, "no request joined the batch"
    assert all(others >= 1 for others in joined.values())
    assert set(joined) | alone == set(ids) and not set(joined) & alone  # each served one way, once


def test_a_lone_lookup_request_still_uses_drafts(servers: dict[str, Server]) -> None:
    """With nothing else running, a code edit is served alone by the lookup decoder, which accepts drafts."""
    client: Any = servers["lookup"].client(timeout=600)
    reply = client.chat.completions.create(
        model="default_model", messages=CHATS["code_edit"], max_tokens=120, temperature=0.0
    )
    lines = lookup_lines(servers["lookup"], reply.id)
    assert lines, "the lone request did not take the lookup path"
    _, tokens, passes, accepted, _ = lines[0]
    assert int(accepted) > 0 and int(passes) < int(tokens)
    assert reply.id not in dict(JOINED.findall(servers["lookup"].log()))
