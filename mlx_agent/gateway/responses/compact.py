"""Compaction of a long Responses conversation by the served model: what Codex asks for when its context fills.

Codex asks in one of two ways (its ``remote_compaction_v2`` feature chooses):

* ``POST /v1/responses/compact`` with the conversation (``model``, ``input``, ``instructions``, ``tools``, ...).
  The answer is a ``response.compaction`` object whose ``output`` is the new history: the conversation's
  ``user`` messages, as sent, then one ``compaction`` item.
* ``POST /v1/responses`` whose ``input`` holds a ``compaction_trigger`` item. The answer is a Response
  (streamed when asked) whose output is exactly one ``compaction`` item.

Either way the worker gets the conversation as a ``/v1/responses`` turn would send it (instructions, tools,
items: so its prompt cache reuses the previous turn's whole prefix), then one more user message,
``SUMMARY_REQUEST``. The summary is plain text whatever ``text.format`` the conversation's turns ask for: that
format shapes a turn's answer, and enforced on the summary it would take away the ``<summary>`` tags, or leave
nothing a schema allows (a self-referencing one: ``{"$ref": "#"}``). The reply's text (reasoning left out;
inside ``<summary>`` tags when it used them) is the summary. OpenAI's ``encrypted_content`` is opaque to
clients; here it is the summary itself after ``SUMMARY_MARK``, and a later request that sends the item back gets
it as a user message (``request.py``).
A reply with no summary text is a 502 ``compaction_failed``. A summary cut by the reply limit is kept (a
shorter context is what the client needs); compaction responses are not stored.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from mlx_agent.api_errors import Code
from mlx_agent.errors import RequestRefused
from mlx_agent.gateway.door.http_errors import json_response, refused
from mlx_agent.gateway.door.security import API_KEY_ID
from mlx_agent.gateway.responses.bodies import ResponsesBody
from mlx_agent.gateway.responses.output import IdMaker, base_response, failed, finished, new_id, usage_of
from mlx_agent.gateway.responses.request import COMPACTION_TRIGGER, SUMMARY_MARK, ResponsesRequest, to_chat
from mlx_agent.gateway.sse import Accountant, ChunkTranslator, sse
from mlx_agent.gateway.upstream import Upstream
from mlx_agent.worker_routes import WorkerRoute

SUMMARY_REQUEST = (
    "Context checkpoint: the conversation above is about to be replaced by a summary, and whoever continues "
    "the work will see only the user's messages and that summary. Write it now: the user's goals and "
    "constraints, what has been done so far (files read or changed, commands run and what they showed), the "
    "decisions made, and exactly what remains to do next. Do not call any tool. Reply with the summary only, "
    "inside <summary></summary>."
)
SUMMARY_TAGS = re.compile(r"<summary>(.*?)(?:</summary>|$)", re.DOTALL)
NO_SUMMARY = "the model answered the compaction request without a summary"
History = Callable[[str | None, str | None], list[dict[str, Any]] | None]


def is_trigger(body: ResponsesBody) -> bool:
    """Return whether a ``/v1/responses`` body asks for a compaction (a ``compaction_trigger`` input item)."""
    items = body.input
    return isinstance(items, list) and any(
        isinstance(item, Mapping) and item.get("type") == COMPACTION_TRIGGER for item in items
    )


def summary_request(
    body: ResponsesBody, *, default_model: str, history: list[dict[str, Any]] | None = None, stream: bool = False
) -> ResponsesRequest:
    """Translate a compaction request: the conversation as a turn would send it, then ``SUMMARY_REQUEST``."""
    translated = to_chat(body, default_model=default_model, history=history)
    translated.chat.pop("response_format", None)  # the summary is text: a turn's format is not the checkpoint's
    translated.chat["messages"].append({"role": "user", "content": SUMMARY_REQUEST})
    translated.chat["stream"] = stream
    return translated


def summary_of(text: object) -> str:
    """Return the summary in a reply's text (inside ``<summary>`` tags when it used them); 502 when empty."""
    found = SUMMARY_TAGS.search(text) if isinstance(text, str) else None
    summary = (found.group(1) if found else text if isinstance(text, str) else "").strip()
    if not summary:
        raise refused(Code.COMPACTION_FAILED, NO_SUMMARY)
    return summary


def compaction_item(summary: str, make_id: IdMaker = new_id) -> dict[str, Any]:
    """Return the ``compaction`` item that carries ``summary`` (read back by ``request.py``)."""
    return {"id": make_id("cmp"), "type": "compaction", "encrypted_content": SUMMARY_MARK + summary}


def user_item(text: str) -> dict[str, Any]:
    """Return a user ``message`` item holding ``text``."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def kept_messages(body: ResponsesBody, history: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Return the conversation's user messages (a stored one's first), as sent: what a compaction keeps."""
    kept = [user_item(m["content"]) for m in history or [] if m.get("role") == "user" and m.get("content")]
    items = body.input
    if isinstance(items, str):
        return [*kept, user_item(items)]
    return kept + [
        {"type": "message", "role": "user", "content": item.get("content")}
        for item in items or []
        if isinstance(item, Mapping) and item.get("role") == "user" and item.get("type", "message") == "message"
    ]


def compacted(
    body: ResponsesBody,
    doc: Mapping[str, Any],
    created_at: int,
    make_id: IdMaker = new_id,
    history: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Return the ``response.compaction`` object for the worker's (non-streamed) summary reply."""
    message = doc["choices"][0].get("message") or {}
    summary = compaction_item(summary_of(message.get("content")), make_id)
    return {
        "id": make_id("resp"),
        "object": "response.compaction",
        "created_at": created_at,
        "output": [*kept_messages(body, history), summary],
        "usage": usage_of(doc.get("usage")),
    }


class CompactionStream(ChunkTranslator):
    """A ``compaction_trigger`` Response streamed: opened at once, its one compaction item sent at the end."""

    def __init__(self, base: Mapping[str, Any], make_id: IdMaker = new_id, on_usage: Accountant | None = None) -> None:
        super().__init__(on_usage)
        self.base = dict(base)
        self.make_id = make_id
        self.sequence = 0
        self.text: list[str] = []

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = sse(kind, {"type": kind, "sequence_number": self.sequence, **fields})
        self.sequence += 1
        return event

    def start(self) -> bytes:
        """Return ``response.created`` and ``response.in_progress``."""
        return self._event("response.created", response=self.base) + self._event(
            "response.in_progress", response=self.base
        )

    def keepalive(self, event: bytes) -> bytes:
        """Return another ``response.in_progress``: nothing else goes out until the summary is whole.

        An event, not an SSE comment: Codex's ``stream_idle_timeout_ms`` counts events and skips comments, and a
        long conversation's prefill can take minutes.
        """
        return self._event("response.in_progress", response=self.base)

    def content(self, text: str, out: list[bytes]) -> None:
        """Collect the summary's text; nothing is sent until the reply ends."""
        self.text.append(text)

    def finish(self) -> bytes:
        """Return the compaction item's events and ``response.completed`` (``response.failed`` without a summary)."""
        try:
            item = compaction_item(summary_of("".join(self.text)), self.make_id)
        except RequestRefused as refusal:
            return self.fail(refusal.message)
        self.ended = True
        final = finished(self.base, [item], "stop", self.usage)
        return b"".join(
            [
                self._event("response.output_item.added", output_index=0, item=item),
                self._event("response.output_item.done", output_index=0, item=item),
                self._event("response.completed", response=final),
            ]
        )

    def fail(self, message: str) -> bytes:
        """Return ``response.failed``."""
        self.ended = True
        return self._event("response.failed", response=failed(self.base, [], message))


class Compactor:
    """The handlers of both ways of asking for a compaction."""

    def __init__(self, upstream: Upstream, history: History) -> None:
        self.upstream = upstream
        self.history = history  # the stored conversation a previous_response_id names (ResponsesApi._history)

    async def compact(self, request: web.Request, body: ResponsesBody) -> web.Response:
        """``POST /v1/responses/compact``: the user messages and one compaction item."""
        if body.stream is True:
            raise refused(
                Code.UNSUPPORTED_PARAMETER, "a compaction is answered whole: leave out 'stream'", param="stream"
            )
        history = self.history(body.previous_response_id, request.get(API_KEY_ID))
        named = self.upstream.fleet.route(body.model)
        translated = summary_request(body, default_model=named.name, history=history)
        model, prepared = self.upstream.prepare(request, translated.chat)
        doc = await self.upstream.complete(request, model, prepared)
        return json_response(compacted(body, doc, int(time.time()), history=history))

    async def trigger(
        self, request: web.Request, body: ResponsesBody, history: list[dict[str, Any]] | None
    ) -> web.StreamResponse:
        """Answer a ``/v1/responses`` request with a ``compaction_trigger``: a Response with one compaction item."""
        named = self.upstream.fleet.route(body.model)
        streamed = body.stream is True
        translated = summary_request(body, default_model=named.name, history=history, stream=streamed)
        model, prepared = self.upstream.prepare(request, translated.chat)
        base = base_response(translated, new_id("resp"), int(time.time()))
        if streamed:
            account = self.upstream.accountant(request, WorkerRoute.CHAT, prepared.body)
            return await self.upstream.stream(request, model, prepared, CompactionStream(base, on_usage=account))
        doc = await self.upstream.complete(request, model, prepared)
        message = doc["choices"][0].get("message") or {}
        item = compaction_item(summary_of(message.get("content")))
        return json_response(finished(base, [item], "stop", doc.get("usage")))
