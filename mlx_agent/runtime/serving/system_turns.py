"""System messages placed so that an append-only conversation renders to a prompt that only grows.

An agent resends the whole conversation every turn, plus what is new; the worker's prompt cache serves the
longest token prefix it holds, so a turn hits only as far as its rendered prompt starts with the previous one.
Folding a late system message into the first one (what the workers used to do, and what mlx_vlm's own server
does) rewrites the first message, and everything after it is prefilled again. The mlx_lm worker places through
``for_provider``, the mlx-vlm one through ``mlx_vlm_server.InstructionPlacer``.

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
shape (the role of the message before the late one) and remembers the first way whose rendering succeeds,
shows the text where it was sent, and keeps the probe's rendering a prefix of its continuations.
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
_FIRST, _ASK, _SAID, _RESULT, _LATE, _NEXT_USER, _NEXT_SAID = (
    "Alpha rules.",
    "Bravo question.",
    "Charlie answer.",
    "Delta result.",
    "Zulu reminder.",
    "Echo question.",
    "Foxtrot answer.",
)
_SAYS = {"assistant": (_SAID,), "tool": (_RESULT,), "system": (_SAID,)}
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


def _probe(before: str) -> list[dict[str, Any]]:
    """Return a conversation ending in a message of role ``before``, ready for a late system message."""
    probe: list[dict[str, Any]] = [{"role": "system", "content": _FIRST}, {"role": "user", "content": _ASK}]
    if before == "assistant":
        probe.append({"role": "assistant", "content": _SAID})
    elif before == "tool":
        probe += [
            {"role": "assistant", "content": "", "tool_calls": [_CALL]},
            {"role": "tool", "tool_call_id": "call_probe", "name": "probe", "content": _RESULT},
        ]
    elif before == "system":  # a late system message right after another: both get the same way
        probe += [{"role": "assistant", "content": _SAID}, {"role": "system", "content": _FIRST}]
    return probe


FOLLOWERS: tuple[tuple[dict[str, Any], ...], ...] = (
    (),
    ({"role": "assistant", "content": _NEXT_SAID},),
    ({"role": "user", "content": _NEXT_USER},),
)


def works(render: Render, before: str, way: Way, followers: Sequence[Sequence[dict[str, Any]]]) -> bool:
    """Whether writing a late system message ``way`` after a ``before`` message renders it where it was sent.

    For every follower: the rendering succeeds, the late text appears once, after what came before it and
    before what follows, and the conversation up to it renders as a prefix of the rendering with the follower.
    """
    base = _probe(before)
    if before == "system":
        write(base, len(base) - 1, way)  # the earlier late message, written the same way
    try:
        for follower in followers:
            conversation = [*base, {"role": "system", "content": _LATE}, *[dict(m) for m in follower]]
            write(conversation, len(base), way)
            up_to = conversation[: len(conversation) - len(follower)]
            head = render(up_to, False)
            whole = render(conversation, False)
            if head.count(_LATE) != 1 or not whole.startswith(head):
                return False
            late_at = head.index(_LATE)
            if any(text not in head[:late_at] for text in (_FIRST, _ASK, *_SAYS.get(before, ()))):
                return False
            if follower and text_of(follower[0]["content"]) not in whole[len(head) :]:
                return False
            render(conversation, True)  # the generation prompt renders too
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


def for_provider(provider: Any) -> SystemTurns | None:
    """Return the ``SystemTurns`` of the loaded model's template (None without a chat template)."""
    tokenizer = getattr(provider, "tokenizer", None)
    if tokenizer is None or not getattr(tokenizer, "has_chat_template", False):
        return None
    defaults = dict(getattr(provider.cli_args, "chat_template_args", None) or {})

    def render(messages: list[dict[str, Any]], generation: bool) -> str:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation, **defaults)
        return str(text)

    return SystemTurns(render)
