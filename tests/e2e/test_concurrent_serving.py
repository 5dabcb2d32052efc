"""Concurrent requests through the real wrapped worker: a short request during a long prefill, lookup in a batch.

The worker's prefill runs in chunks of 64 tokens here (``--prefill-step-size``), so the tiny model's long prompt
takes many steps. A streamed reply shows its prefill as ``: keepalive done/total`` comments, and the tests read
the order of those and of the first tokens, never their times. Replies are compared with bare ``mlx_lm.server``
(unpatched, each request alone) and, for lookup, with the plain wrapped worker: the one several files share
(``wrapped_tiny``: the tiny model's weights, its template refusing unknown roles, which renders these prompts
as the tiny model's own template does).
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.contract_support import LOOKUP
from tests.e2e.lookup_chats import CHATS, CODE, LOOKUP_LINE
from tests.e2e.shared_workers import PREFILL_STEP
from tests.e2e.wrapped_support import STOPPED, Server, running

pytestmark = pytest.mark.e2e

LONG = " ".join(f"item{i % 89} is number {i}," for i in range(160))  # about 1,300 tokens: twenty chunks
SHORT = "Hello! How are you today?"
JOINED = re.compile(r"mlx-agent: (\S+) joins the batch without prompt lookup \((\d+) other requests active")
HANDED = re.compile(r"mlx-agent: (\S+) hands over to the batch after (\d+) tokens")
LEAVING = 20000  # tokens: far more than the test waits for
EDIT = [{"role": "user", "content": f"Rename Stack to Pile in this code:\n{CODE}"}]


@pytest.fixture(scope="module")
def servers(
    tiny_model: Path, wrapped_tiny: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Server]]:
    """Start bare mlx_lm and the wrapped worker with prompt lookup on the tiny model; take the shared wrapped one."""
    logs = tmp_path_factory.mktemp("concurrent")
    with (
        running(tiny_model, logs, *PREFILL_STEP, bare=True) as bare,
        running(tiny_model, logs, *LOOKUP) as lookup,
    ):
        yield {"bare": bare, "wrapped": wrapped_tiny, "lookup": lookup}


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
    handed = {ident for ident, _ in HANDED.findall(log) if ident in ids}
    assert joined, "no request joined the batch"
    assert all(others >= 1 for others in joined.values())
    assert set(joined) | alone == set(ids) and not set(joined) & alone  # each started one way, once
    assert handed <= alone  # only a reply that started alone is handed over


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
    assert reply.id not in dict(HANDED.findall(servers["lookup"].log()))  # nothing arrived: it stayed alone


def chat(
    server: Server,
    messages: list[dict[str, str]],
    max_tokens: int,
    *,
    stream: bool = False,
    stop: list[str] | None = None,
    started: threading.Event | None = None,
    leave: threading.Event | None = None,
) -> dict[str, Any]:
    """Send one greedy chat request; return its id, text, finish reason and usage.

    Streamed, it sets ``started`` after its third content chunk and, once ``leave`` is set, closes the stream.
    """
    body: dict[str, Any] = {"messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
    if stop:
        body["stop"] = stop
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    request = urllib.request.Request(
        f"{server.url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as answer:
        if not stream:
            reply = json.loads(answer.read())
            choice = reply["choices"][0]
            return {
                "id": reply["id"],
                "text": choice["message"]["content"],
                "finish": choice["finish_reason"],
                "usage": (reply["usage"]["prompt_tokens"], reply["usage"]["completion_tokens"]),
            }
        result: dict[str, Any] = {"id": "", "text": "", "finish": None, "usage": None}
        chunks = 0
        for raw in answer:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            result["id"] = chunk["id"]
            if chunk.get("usage"):
                result["usage"] = (chunk["usage"]["prompt_tokens"], chunk["usage"]["completion_tokens"])
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content") or ""
                result["text"] += piece
                result["finish"] = choice.get("finish_reason") or result["finish"]
                chunks += bool(piece)
            if started is not None and chunks == 3:
                started.set()
            if leave is not None and leave.is_set():
                break  # the with block closes the connection: the client has left
        return result


def in_thread(call: Callable[[], dict[str, Any]], replies: dict[str, dict[str, Any]], name: str) -> threading.Thread:
    """Start ``call`` in a thread that files its reply under ``name``."""

    def run() -> None:
        replies[name] = call()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize(("finish", "stop", "max_tokens"), [("stop", ["ibonac"], 3000), ("length", None, 700)])
def test_a_lookup_reply_overtaken_mid_reply_hands_over_to_the_batch(
    servers: dict[str, Server], finish: str, stop: list[str] | None, max_tokens: int
) -> None:
    """Three requests sent while a lookup reply runs alone: it hands over, and all four replies are native."""
    lookup, plain = servers["lookup"], servers["wrapped"]
    others: dict[str, Callable[[Server], dict[str, Any]]] = {
        "stop": lambda server: chat(server, [{"role": "user", "content": f"Edit one:\n{CODE}"}], 400, stop=["ather"]),
        "limit": lambda server: chat(server, [{"role": "user", "content": SHORT}], 37, stream=True),
        "plain": lambda server: chat(server, [{"role": "user", "content": f"Edit two:\n{CODE}"}], 200),
    }

    def overtaken(server: Server, started: threading.Event | None = None) -> dict[str, Any]:
        return chat(server, EDIT, max_tokens, stream=True, stop=stop, started=started)

    started = threading.Event()
    replies: dict[str, dict[str, Any]] = {}
    first = in_thread(lambda: overtaken(lookup, started), replies, "overtaken")
    assert started.wait(timeout=300), "the lookup reply never streamed"
    threads = [in_thread(partial(call, lookup), replies, name) for name, call in others.items()]
    for thread in [first, *threads]:
        thread.join(timeout=600)
    native = {"overtaken": overtaken(plain), **{name: call(plain) for name, call in others.items()}}
    assert native["overtaken"]["finish"] == finish and native["stop"]["finish"] == "stop"  # the stops do cut
    assert native["limit"]["finish"] == "length" and native["limit"]["usage"][1] == 37
    for name, reply in replies.items():
        assert {k: reply[k] for k in ("text", "finish", "usage")} == {
            k: native[name][k] for k in ("text", "finish", "usage")
        }, name
    log = lookup.log()
    handed = dict(HANDED.findall(log))
    assert replies["overtaken"]["id"] in handed, "the lookup reply was not handed over"
    assert 3 <= int(handed[replies["overtaken"]["id"]]) < native["overtaken"]["usage"][1]  # mid-reply
    joined = dict(JOINED.findall(log))
    assert all(replies[name]["id"] in joined for name in others)  # the others started in the batch


def test_a_handed_over_reply_is_cancelled_when_its_client_leaves(servers: dict[str, Server]) -> None:
    """A streamed lookup reply whose client leaves after its hand-off stops in the batch; the other is whole."""
    lookup = servers["lookup"]
    stopped, handed = len(STOPPED.findall(lookup.log())), len(HANDED.findall(lookup.log()))
    started, leave = threading.Event(), threading.Event()
    replies: dict[str, dict[str, Any]] = {}
    messages = [{"role": "user", "content": f"Rename Stack to Heap:\n{CODE}"}]
    first = in_thread(
        lambda: chat(lookup, messages, LEAVING, stream=True, started=started, leave=leave), replies, "leaving"
    )
    assert started.wait(timeout=300), "the lookup reply never streamed"
    other = in_thread(lambda: chat(lookup, [{"role": "user", "content": SHORT}], 300), replies, "other")
    for _ in range(3000):
        if len(HANDED.findall(lookup.log())) > handed:
            break
        time.sleep(0.05)
    leave.set()
    first.join(timeout=600)
    other.join(timeout=600)
    ident, _ = HANDED.findall(lookup.log())[handed]
    assert ident == replies["leaving"]["id"], "the lookup reply was not handed over"
    for _ in range(600):
        found = STOPPED.findall(lookup.log())
        if len(found) > stopped:
            break
        time.sleep(0.1)
    label, tokens, late = STOPPED.findall(lookup.log())[stopped]
    assert label == ident and int(tokens) + int(late) < LEAVING // 4  # stopped in the batch, long before the end
    assert replies["leaving"]["finish"] is None  # the client left before the end
    native = chat(servers["wrapped"], [{"role": "user", "content": SHORT}], 300)
    assert {k: replies["other"][k] for k in ("text", "usage")} == {k: native[k] for k in ("text", "usage")}
