"""What the content fuzz holds each answer to, and the traps it watches (``content_fuzz`` makes the requests).

``attempt`` sends one body and holds the answer to the rule: a 2xx with the endpoint's reply, or an error in its
API's shape that is a 4xx or a documented 501/503; no 2xx where the model kind must refuse the body
(``refused_by_kind``); no connection to the listener, no open of the secret file, and a normal request answered
after it. ``attempt_every_part`` does so for every part type as its API writes it.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

from tests.e2e.content_fuzz import APIS, named, placed
from tests.e2e.front_support import Front
from tests.e2e.fuzz_support import api_error, post, reply
from tests.media_traps import Traps

DOCUMENTED_5XX = (501, 503)

# What a 2xx answer of an endpoint ``reply`` does not know is: one key and the type of its value.
OTHER_REPLIES = {
    "/v1/embeddings": ("data", list),
    "/api/embed": ("embeddings", list),
    "/api/embeddings": ("embedding", list),
    "/api/generate": ("done", bool),
    "/v1/responses/compact": ("object", str),
}


def answered(path: str, content_type: str, text: bytes) -> bool:
    """Say whether a 2xx answer is the endpoint's reply: its JSON document, or a stream of events."""
    if content_type.startswith("text/event-stream"):  # keep-alive comments (": ...") may come before the events
        lines = [line for line in text.splitlines() if line and not line.startswith(b":")]
        return bool(lines) and lines[0].startswith((b"data: ", b"event: "))
    if path not in OTHER_REPLIES or not content_type.startswith("application/json"):
        return reply(path, content_type, text)
    key, kind = OTHER_REPLIES[path]
    answer = json.loads(text)
    return isinstance(answer, dict) and isinstance(answer.get(key), kind)


# What the docs promise each model kind refuses, stated here apart from the code that refuses it (docs/gateway.md,
# "Content parts"): the part types no model takes (a video, audio or file part, whatever it holds), images on a
# text model, chat of any kind on an embedding model and embeddings of a chat model.
MEDIA_TYPES = frozenset(
    ("video_url", "input_video", "video", "input_audio", "audio", "audio_url", "input_file", "file")
)
IMAGE_TYPES = frozenset(("image_url", "input_image", "image"))
EMBEDDINGS = frozenset(("/api/embed", "/api/embeddings", "/v1/embeddings"))
OLLAMA_CHAT = frozenset(("/api/chat", "/api/generate"))


def _top_parts(path: str, body: dict[str, Any]) -> list[Any]:
    """Return the parts at the top of each content a chat API reads: a message's, a system prompt's, an output's."""
    holders: list[Any] = []
    if path in ("/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"):
        holders = [m.get("content") for m in body.get("messages", ()) if isinstance(m, dict)]
        holders.append(body.get("system"))
    elif path in ("/v1/responses", "/v1/responses/compact"):
        holders = [i.get("content", i.get("output")) for i in body.get("input", ()) if isinstance(i, dict)]
    return [part for holder in holders if isinstance(holder, list) for part in holder]


def refused_by_kind(kind: str, path: str, body: dict[str, Any]) -> bool:
    """Say whether a model of ``kind`` must refuse ``body`` on ``path`` whatever else it holds (a 2xx is a defect)."""
    if kind == "embedding" or path in EMBEDDINGS:
        # Ollama's load request (a generate without a prompt, a chat without messages) is not a chat (docs/ollama.md).
        loads = body.get("prompt" if path == "/api/generate" else "messages") in (None, "", [])
        return (kind == "embedding") != (path in EMBEDDINGS) and not (path in OLLAMA_CHAT and loads)
    types = {part.get("type") for part in _top_parts(path, body) if isinstance(part, dict)}
    images: list[Any] = [body.get("images")]
    images += [m.get("images") for m in body.get("messages", ()) if path == "/api/chat" and isinstance(m, dict)]
    if kind == "text" and (types & IMAGE_TYPES or any(isinstance(i, list) and i for i in images)):
        return True
    return bool(types & MEDIA_TYPES)


# The error codes each model kind's cases got, printed at the end of its module (``print_codes``).
CODES: defaultdict[str, Counter[str]] = defaultdict(Counter)


def print_codes(kind: str) -> None:
    """Print the error codes the cases on a model of ``kind`` got, most frequent first."""
    print(f"\nfuzz on the {kind} model, error codes: {dict(CODES[kind].most_common())}")


def _code(answer: dict[str, Any]) -> object:
    """Return an error document's code: OpenAI's and Anthropic's inside ``error``, Ollama's beside it."""
    inner = answer.get("error")
    return inner.get("code", inner.get("type")) if isinstance(inner, dict) else answer.get("code")


# Part types that carry media or a document: one that names a URL or a path is never taken, on any API or kind.
NAMED_MEDIA = IMAGE_TYPES | MEDIA_TYPES | {"image_file", "document"}


def attempt(
    front: Front,
    traps: Traps,
    kind: str,
    path: str,
    body: dict[str, Any],
    seen: Counter[str],
    healthy: Callable[[], bool],
    refuse: bool = False,
) -> None:
    """Send one hostile body to a model of ``kind``; check the answer, the listener, the file and a normal request.

    With ``refuse`` (or where the kind must refuse the body: ``refused_by_kind``) a 2xx is a defect.
    """
    raw = json.dumps(body, allow_nan=True)
    status, content_type, text = post(front, path, raw.encode())
    seen[f"{status // 100}xx"] += 1
    case = (path, status, raw[:400], text[:300])
    assert not (200 <= status < 300 and (refuse or refused_by_kind(kind, path, body))), case
    if 200 <= status < 300:
        assert answered(path, content_type, text), case
    else:
        assert 400 <= status < 500 or status in DOCUMENTED_5XX, case
        assert content_type.startswith("application/json"), case
        answer = json.loads(text)
        assert api_error(path, answer), case
        CODES[kind][str(_code(answer))] += 1
    assert traps.listener.connections == 0, case
    assert not traps.secret.touched(), case
    assert healthy(), case


def attempt_every_part(
    front: Front, traps: Traps, kind: str, api: str, seen: Counter[str], healthy: Callable[[], bool]
) -> None:
    """Send every part type as written (``named``) on ``api``: media and documents naming a URL or path are refused."""
    for part, ref in named(traps.listener, traps.secret.path, APIS.index(api)):
        refuse = part["type"] in NAMED_MEDIA or api in OLLAMA_CHAT
        attempt(front, traps, kind, api, placed(api, part, ref), seen, healthy, refuse)
