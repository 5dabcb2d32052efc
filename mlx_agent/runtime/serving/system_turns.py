"""System messages placed so that an append-only conversation renders to a prompt that only grows.

An agent resends the whole conversation every turn, plus what is new; the worker's prompt cache serves the
longest token prefix it holds, so a turn hits only as far as its rendered prompt starts with the previous one.
Folding a late system message into the first one (what the workers used to do, and what mlx_vlm's own server
does) rewrites the first message, and everything after it is prefilled again. Both workers place through
``conversation.Conversations`` (the mlx-vlm one where mlx_vlm renders: ``mlx_vlm_server.AdaptedRender``).

So the leading run of system (and developer) messages joins into one first system message, as templates
expect, and every later one stays at its place, written one of three ways:

* ``keep``: as a system message, where the template renders one there (ChatML, Qwen2/3, Llama 3 style);
* ``user``: as a user message reading ``[System message]`` and the text, where the template raises on a late
  system message (as some Qwen templates do) or leaves it out;
* ``merge``: the same text appended to the message before it (a user message or a tool result), where the
  template refuses a user message there too (templates that insist on alternating roles);
* ``front``: joined to the first system message, as before, only where none of these renders: the request is
  served, and its cache hits up to that first message only.

The way is chosen by rendering, not by model name: ``SystemTurns`` renders a probe conversation once per
shape (the role of the message before the late one) as serving renders it (with the generation prompt; the
request's tools and the other adaptations come with the ``Render`` that ``conversation.Adapter`` gives it) and
remembers the first way whose rendering succeeds, shows the text where it was sent, keeps the previous turn's
prompt as far as the turn without it would (a template's "last user query" logic must not rewrite earlier
turns: Qwen3.5), and keeps the probe's rendering a prefix of its continuations (``works``).
Pure: no mlx; the template is called through a ``Render`` callable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

SYSTEM_ROLES = ("system", "developer")
MARKER = "[System message]"
Way = Literal["keep", "user", "merge", "front"]
WAYS: tuple[Way, ...] = ("keep", "user", "merge")  # in order of preference; "front" is the last resort
# Renders messages with the served template (add_generation_prompt as given); raises what the template raises.
Render = Callable[[list[dict[str, Any]], bool], str]

# The probe: words the tiny test tokenizers and real ones keep whole, so the checks read plain text.
_FIRST, _ASK, _SAID, _RESULT, _LATE, _NEXT_USER, _NEXT_SAID, _EARLIER, _NEXT_ASK = (
    "Alpha rules.",
    "Bravo question.",
    "Charlie answer.",
    "Delta result.",
    "Zulu reminder.",
    "Echo question.",
    "Foxtrot answer.",
    "Golf result.",
    "Hotel question.",
)
_SAYS = {"assistant": (_SAID,), "tool": (_RESULT,), "system": (_SAID,), "user": (_NEXT_ASK,)}
_CALL = {"id": "call_probe", "type": "function", "function": {"name": "probe", "arguments": {"query": "probe"}}}


def text_of(content: object) -> str:
    """Return the text of a message's content (a string, or the text parts of a list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and part.get("type") in ("text", "input_text")
        )
    return ""


def fold_leading(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Join the leading system (or developer) messages into one system message; return it and where it ends.

    A single leading ``system`` message is left as it is (content parts and all). The second value is the index,
    in the returned list, of the first message after the leading system message (0 when there is none).
    """
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in SYSTEM_ROLES:
        lead += 1
    if lead == 0:
        return list(messages), 0
    if lead == 1 and messages[0]["role"] == "system":
        return list(messages), 1
    texts = [text for text in (text_of(m.get("content")) for m in messages[:lead]) if text]
    return [{"role": "system", "content": "\n\n".join(texts)}, *messages[lead:]], 1


def marked(content: object) -> str:
    """Return a late system message's text as the model reads it outside a system turn."""
    return f"{MARKER}\n{text_of(content)}"


def write(messages: list[dict[str, Any]], index: int, way: Way) -> None:
    """Write the late system message at ``index`` of ``messages`` the given way, in place."""
    message = messages[index]
    if way == "keep":
        messages[index] = {**message, "role": "system"}
        return
    if way == "merge" and index > 0 and messages[index - 1].get("role") in ("user", "tool"):
        before, late = messages[index - 1], marked(message.get("content"))
        content = before.get("content")
        if isinstance(content, list):  # keep the parts (an image): the text joins them
            messages[index - 1] = {**before, "content": [*content, {"type": "text", "text": "\n\n" + late}]}
        else:
            messages[index - 1] = {**before, "content": "\n\n".join(t for t in (text_of(content), late) if t)}
        del messages[index]
        return
    if way == "front":
        del messages[index]
        first = messages[0] if messages and messages[0].get("role") == "system" else None
        text = text_of(message.get("content"))
        if first is None:
            messages.insert(0, {"role": "system", "content": text})
        else:
            messages[0] = {"role": "system", "content": "\n\n".join(t for t in (text_of(first["content"]), text) if t)}
        return
    messages[index] = {"role": "user", "content": marked(message.get("content"))}


def place(messages: Sequence[dict[str, Any]], way_for: Callable[[str], Way]) -> list[dict[str, Any]]:
    """Return ``messages`` with the leading system messages folded and each later one written ``way_for`` it.

    ``way_for`` gets the role of the message before the late one (after the earlier ones were written).
    """
    placed, start = fold_leading(messages)
    index = max(start, 1)
    while index < len(placed):
        if placed[index].get("role") in SYSTEM_ROLES:
            way = way_for(str(placed[index - 1].get("role")))
            before = len(placed)
            write(placed, index, way)
            index += 1 - (before - len(placed))  # a merge (or a fold into the first message) removed it
        else:
            index += 1
    return placed


def _prior(with_call: bool) -> list[dict[str, Any]]:
    """Return the probe's previous turn: a question, and (where the template takes calls) a call and its result."""
    prior: list[dict[str, Any]] = [{"role": "system", "content": _FIRST}, {"role": "user", "content": _ASK}]
    if with_call:
        prior += [
            {"role": "assistant", "content": "", "tool_calls": [_CALL]},
            {"role": "tool", "tool_call_id": "call_probe", "name": "probe", "content": _EARLIER},
        ]
    return prior


def _since(before: str) -> list[dict[str, Any]]:
    """Return what a turn appends after the previous one, ending in a message of role ``before``."""
    if before == "assistant":
        return [{"role": "assistant", "content": _SAID}]
    if before == "tool":
        call = {**_CALL, "id": "call_probe2"}
        return [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_probe2", "name": "probe", "content": _RESULT},
        ]
    if before == "system":  # a late system message right after another: both get the same way
        return [{"role": "assistant", "content": _SAID}, {"role": "system", "content": _FIRST}]
    return [{"role": "assistant", "content": _SAID}, {"role": "user", "content": _NEXT_ASK}]


FOLLOWERS: tuple[tuple[dict[str, Any], ...], ...] = (
    (),
    ({"role": "assistant", "content": _NEXT_SAID},),
    ({"role": "user", "content": _NEXT_USER},),
)


def served_cut(render: Render, messages: list[dict[str, Any]]) -> str:
    """Return the part of ``messages``' prompt the next turn must start with.

    That is the longest common prefix of the rendering with and without the generation prompt: the generation
    prompt is replaced by the reply's own turn, and some templates end a turn differently without it (Phi-3.5
    appends ``eos_token``), so neither rendering alone is what the next turn repeats.
    """
    served, bare = render(messages, True), render(messages, False)
    return served[: common_prefix(served, bare)]


def common_prefix(a: str, b: str) -> int:
    """Return the length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def works(render: Render, before: str, way: Way, followers: Sequence[Sequence[dict[str, Any]]]) -> bool:
    """Whether writing a late system message ``way`` after a ``before`` message keeps the prompt growing.

    The probe is a previous turn (ending in a tool result) and what the next turn appends (ending in a
    ``before`` message), then the late message written ``way``. Rendered as serving renders (the generation
    prompt), the late message must keep as much of the previous turn's prompt as the turn without it does (so a
    template's "last user query" logic does not rewrite earlier turns), show its text once, after what came
    before it, and the turn with it must be a prefix of its continuation by every follower.
    """
    try:
        for with_call in (True, False):
            prior = _prior(with_call)
            try:
                previous = served_cut(render, prior)
                break
            except Exception:  # a template without tool calls: a previous turn without one
                if not with_call:
                    raise
        since = _since(before)
        if before == "system":
            write(since, len(since) - 1, way)  # the earlier late message, written the same way
        base = [*prior, *since]
        try:
            kept_without = common_prefix(render(base, True), previous)
        except Exception:  # the turn without the late message does not render: it must keep all
            kept_without = len(previous)
        turn = [*base, {"role": "system", "content": _LATE}]
        write(turn, len(base), way)
        head = served_cut(render, turn)
        if common_prefix(render(turn, True), previous) < kept_without or head.count(_LATE) != 1:
            return False
        late_at = head.index(_LATE)
        if any(text not in head[:late_at] for text in (_FIRST, _ASK, *_SAYS.get(before, ()))):
            return False
        for follower in followers:
            whole = render([*turn, *[dict(m) for m in follower]], True)
            if not whole.startswith(head):
                return False
            if follower and text_of(follower[0]["content"]) not in whole[len(head) :]:
                return False
    except Exception:  # the template's own refusal (raise_exception), or any error rendering the probe
        return False
    return True


class SystemTurns:
    """The served template's way of writing late system messages, decided by rendering once per shape."""

    def __init__(self, render: Render) -> None:
        self._render = render
        self._ways: dict[str, Way] = {}
        self._lock = threading.Lock()

    def way(self, before: str) -> Way:
        """Return how a late system message after a ``before`` message is written (rendered the first time)."""
        with self._lock:
            known = self._ways.get(before)
            if known is None:
                known = self._ways[before] = decide(self._render, before)
            return known

    def place(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Return ``messages`` with its system messages placed for the served template."""
        return place(messages, self.way)


def decide(render: Render, before: str) -> Way:
    """Return the first way that works with every follower, else with the likely ones, else ``front``."""
    for followers in (FOLLOWERS, FOLLOWERS[:2]):
        for way in WAYS:
            if works(render, before, way, followers):
                return way
    return "front"  # what renders wherever a template takes a system message at all
