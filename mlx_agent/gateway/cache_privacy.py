"""Keeping ``cached_tokens`` from telling one API key about another key's prompts.

The worker's prompt cache is shared: a prompt that shares a prefix with anyone's earlier prompt is reported
with that many ``cached_tokens``, which tells the caller that someone sent that prefix. When API keys are in
use the gateway reports, per key::

    cached_tokens = min(worker's cached_tokens,
                        the largest prompt_tokens of an earlier request by the SAME key whose prompt is a
                        prefix of this one, less one token unless the prompts are equal)   # 0 if none

"A prefix" means, for chat, the same endpoint, the same tools and template arguments, and whole messages
equal one by one; for completions, a string prefix of the prompt. The bound counts only what that key itself
sent, so the number can never grow past text the key already knew. Each key remembers its last
``HISTORY`` requests as digests (no prompt text is kept). Without API keys every client is one trust
domain and the worker's number passes through unchanged. Timing still differs between cached and uncached
prompts; this rule does not hide that.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass
from typing import Any

from mlx_agent.worker_routes import BodyKind, WorkerRoute

HISTORY = 64
# Body fields that change how a chat prompt is rendered, besides its messages.
CHAT_PREAMBLE_FIELDS = ("tools", "functions", "chat_template_kwargs", "role_mapping")


def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class PromptShape:
    """What a request's prompt is made of, reduced to what the prefix test needs."""

    route: WorkerRoute
    preamble: bytes
    messages: tuple[bytes, ...] | None  # chat: each message canonically encoded
    text: str | None  # completions: the prompt string

    @classmethod
    def of(cls, route: WorkerRoute, body: dict[str, Any]) -> PromptShape:
        """Return the prompt shape of a request body sent to ``route``."""
        if route.kind is BodyKind.MESSAGES:
            messages = body.get("messages")
            items = tuple(_canonical(m) for m in messages) if isinstance(messages, list) else (_canonical(messages),)
            preamble = _canonical({k: body.get(k) for k in CHAT_PREAMBLE_FIELDS})
            return cls(route, preamble, items, None)
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            return cls(route, b"", None, prompt)
        return cls(route, b"", (_canonical(prompt),), None)

    def units(self) -> int:
        """Return how many prefix units the prompt has (messages, or characters)."""
        if self.messages is not None:
            return len(self.messages)
        return len(self.text or "")

    def digest(self, units: int) -> bytes:
        """Return the digest of the first ``units`` prefix units."""
        h = hashlib.sha256(self.route.path.encode() + b"\0" + self.preamble + b"\0")
        if self.messages is not None:
            for item in self.messages[:units]:
                h.update(hashlib.sha256(item).digest())
        else:
            h.update((self.text or "")[:units].encode())
        return h.digest()


@dataclass(frozen=True)
class _Seen:
    units: int
    digest: bytes
    prompt_tokens: int


class PromptLedger:
    """Per API key, digests of recent prompts and their token counts; bounds what ``cached_tokens`` may say."""

    def __init__(self, history: int = HISTORY) -> None:
        self.history = history
        self._seen: dict[str, deque[_Seen]] = {}

    def bound(self, key_id: str, shape: PromptShape) -> int:
        """Return the most cached tokens this key's own earlier prompts can explain for ``shape``."""
        best = 0
        digests: dict[int, bytes] = {}
        total = shape.units()
        for seen in self._seen.get(key_id, ()):
            # A strict prefix may end mid-token (or in the generation prompt): its last token does not count.
            tokens = seen.prompt_tokens if seen.units == total else seen.prompt_tokens - 1
            if seen.units > total or tokens <= best:
                continue
            digest = digests.get(seen.units)
            if digest is None:
                digest = digests[seen.units] = shape.digest(seen.units)
            if digest == seen.digest:
                best = tokens
        return best

    def record(self, key_id: str, shape: PromptShape, prompt_tokens: int) -> None:
        """Remember that this key sent ``shape``, whose prompt came to ``prompt_tokens`` tokens."""
        seen = self._seen.setdefault(key_id, deque(maxlen=self.history))
        seen.append(_Seen(shape.units(), shape.digest(shape.units()), prompt_tokens))

    def rewrite_usage(self, key_id: str, shape: PromptShape, usage: object) -> None:
        """Clamp ``usage.prompt_tokens_details.cached_tokens`` for this key, in place, and record the prompt."""
        if not isinstance(usage, dict):
            return
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            cached = details.get("cached_tokens")
            if isinstance(cached, int) and not isinstance(cached, bool) and cached > 0:
                details["cached_tokens"] = min(cached, self.bound(key_id, shape))
        prompt_tokens = usage.get("prompt_tokens")
        if isinstance(prompt_tokens, int) and not isinstance(prompt_tokens, bool) and prompt_tokens > 0:
            self.record(key_id, shape, prompt_tokens)
