"""A conversation adapted to what the served chat template accepts, the same way every turn, so the prompt only grows.

Agents send conversations shaped by their own API: Claude Code's parallel calls with ``toolu_`` ids and a
reminder after each tool result, Codex's developer messages and two user messages in a row. Many real templates
refuse some of that (Mistral's 9-character ids and alternating roles, Llama 3.x's one call per turn, Gemma 2's
missing system role). ``Conversations`` rewrites a request's messages into a form its template renders, decided
by rendering probes through the template as serving renders (the request's ``tools``, the generation prompt),
never by model name, and remembered per set of tools: every turn of a session is adapted alike, so turn N+1's
prompt still starts with turn N's. The steps, in order (``STEPS``), each taken only where the template refuses
the probe without it and renders it with it:

* ``content``: text parts joined into a string, ``null`` content as ``""``, JSON-string arguments as objects,
  as mlx_lm does before it renders (always: the probes then see what the template will see);
* ``system_in_user``: the leading system message joined into the first user message, where the template has no
  system role (Gemma 2) or shows it only inside the last user turn (Mistral Nemo: it moves, and is gone once
  the conversation ends in a tool result);
* ``short_ids``: every tool-call id mapped to 9 letters and digits, derived from the client's id, so the same id
  maps the same way on every turn (Mistral); an id already of that form is kept, so a reply's id (which the
  client sends back) renders as the model wrote it, and nothing needs mapping back in the reply;
* ``single_calls``: an assistant message with several calls written as consecutive one-call assistant/tool
  pairs, every call and result kept, results matched by id (Llama 3.x);
* ``user_into_tool``: a user message right after tool results (Claude Code's reminder) joined into the last
  result, where the template insists that a tool result is followed by the assistant (Mistral);
* ``join_users``: consecutive user messages joined into one, their parts kept where one holds an image
  (alternating roles: Mistral, Gemma).

Late system and developer messages are then placed by ``system_turns`` (kept, written as a user turn, merged, or
folded to the front), its probes rendered through these same steps. What still does not render is answered 400
with the template's own message and the remedy (``template_failed``); so is a tool result on a template that
renders without it (Phi-3.5 leaves tool messages out: the agent would wait for a result the model never saw).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.errors import HttpError, TemplateFailed
from mlx_agent.runtime.serving.errors_http import bad_request
from mlx_agent.runtime.serving.system_turns import SystemTurns, Way, place, text_of

# Renders messages with the served template, the request's tools and the generation prompt as given.
ToolsRender = Callable[[list[dict[str, Any]], Sequence[Mapping[str, Any]] | None, bool], str]
Message = dict[str, Any]
Step = Callable[[list[Message]], list[Message]]

SHORT_ID = re.compile(r"[A-Za-z0-9]{9}")
ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
REMEDY = (
    "serve the model with a chat template that can render it (--chat-template FILE), or send a conversation the "
    "template accepts"
)
KEPT_DECISIONS = 8  # sets of tools whose decisions are remembered (an agent sends the same tools every turn)


def template_failed(error: Exception) -> TemplateFailed:
    """Return the error a template's refusal becomes: its own message, and the remedy (answered 400)."""
    return TemplateFailed(f"The chat template could not render this request: {error}; {REMEDY}.")


def template_refuses(reason: str) -> HttpError:
    """Return the 400 for a conversation the template cannot show to the model as it was sent."""
    return bad_request(f"{reason}; {REMEDY}.", param="messages", code=Code.TEMPLATE_ERROR)


# -- the steps ---------------------------------------------------------------------------------------------


def plain_content(messages: list[Message]) -> list[Message]:
    """Return ``messages`` as mlx_lm hands them to the template: text parts joined, null as "", arguments parsed."""
    out = []
    for message in messages:
        message = dict(message)
        content = message.get("content")
        if isinstance(content, list) and all(
            isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)
            for part in content
        ):
            message["content"] = "".join(part["text"] for part in content)
        elif content is None:
            message["content"] = ""
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [_parsed_arguments(call) for call in calls]
        out.append(message)
    return out


def _parsed_arguments(call: object) -> object:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        return call
    function = dict(call["function"])
    arguments = function.get("arguments")
    if isinstance(arguments, str) and arguments:
        try:
            function["arguments"] = json.loads(arguments)
        except ValueError:
            return call  # mlx_lm refuses it as it would have
    return {**call, "function": function}


def short_id(client_id: str) -> str:
    """Return the 9 letters and digits ``client_id`` is written as (itself when it already is)."""
    if SHORT_ID.fullmatch(client_id):
        return client_id
    number = int.from_bytes(hashlib.sha256(client_id.encode()).digest()[:8], "big")
    letters = []
    for _ in range(9):
        number, digit = divmod(number, len(ALPHABET))
        letters.append(ALPHABET[digit])
    return "".join(letters)


def short_ids(messages: list[Message]) -> list[Message]:
    """Return ``messages`` with every tool-call id (in calls and in results) written by ``short_id``."""
    out = []
    for message in messages:
        message = dict(message)
        if isinstance(message.get("tool_call_id"), str):
            message["tool_call_id"] = short_id(message["tool_call_id"])
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [
                {**call, "id": short_id(call["id"])}
                if isinstance(call, Mapping) and isinstance(call.get("id"), str)
                else call
                for call in calls
            ]
        out.append(message)
    return out


def single_calls(messages: list[Message]) -> list[Message]:
    """Return ``messages`` with each several-call assistant turn written as one-call assistant/tool pairs.

    The results that follow the turn are matched to their calls by id (else in order); the assistant's text goes
    with the first call; a result matched to no call stays after the last pair.
    """
    out: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        calls = message.get("tool_calls")
        index += 1
        if message.get("role") != "assistant" or not isinstance(calls, list) or len(calls) < 2:
            out.append(message)
            continue
        results = []
        while index < len(messages) and messages[index].get("role") == "tool":
            results.append(messages[index])
            index += 1
        by_id = {r.get("tool_call_id"): r for r in results if r.get("tool_call_id") is not None}
        unmatched = [r for r in results if r.get("tool_call_id") is None or r.get("tool_call_id") not in _ids(calls)]
        for number, call in enumerate(calls):
            call_id = call.get("id") if isinstance(call, Mapping) else None
            out.append({**message, "content": message.get("content") if number == 0 else "", "tool_calls": [call]})
            result = by_id.pop(call_id, None) if call_id is not None else None
            if result is None and unmatched and call_id not in by_id:
                result = unmatched.pop(0)
            if result is not None:
                out.append(result)
        out += unmatched
    return out


def _ids(calls: list[Any]) -> set[Any]:
    return {call.get("id") for call in calls if isinstance(call, Mapping)}


def user_into_tool(messages: list[Message]) -> list[Message]:
    """Return ``messages`` with a user message right after a tool result joined into that result."""
    out: list[Message] = []
    for message in messages:
        before = out[-1] if out else None
        if (
            message.get("role") == "user"
            and before is not None
            and before.get("role") == "tool"
            and _texts_of(before, message)
        ):
            out[-1] = {**before, "content": "\n\n".join(t for t in (before["content"], message["content"]) if t)}
            continue
        out.append(message)
    return out


def _texts_of(*messages: Message) -> bool:
    return all(isinstance(m.get("content"), str) for m in messages)


def join_users(messages: list[Message]) -> list[Message]:
    """Return ``messages`` with consecutive user messages joined into one (text, or parts where one has an image)."""
    out: list[Message] = []
    for message in messages:
        before = out[-1] if out else None
        if message.get("role") == "user" and before is not None and before.get("role") == "user":
            joined = _joined(before.get("content"), message.get("content"))
            if joined is not None:
                out[-1] = {**before, "content": joined}
                continue
        out.append(message)
    return out


def _joined(first: object, second: object) -> str | list[Any] | None:
    """Return two contents as one, a blank line between (None where either is neither text nor a list of parts)."""
    if isinstance(first, str) and isinstance(second, str):
        return "\n\n".join(t for t in (first, second) if t)
    if not all(isinstance(c, str | list) for c in (first, second)):
        return None
    parts = [_parts(first), _parts(second)]
    return [*parts[0], {"type": "text", "text": "\n\n"}, *parts[1]] if all(parts) else [*parts[0], *parts[1]]


def _parts(content: object) -> list[Any]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def system_in_user(messages: list[Message]) -> list[Message]:
    """Return ``messages`` with a leading system message joined into the first user message."""
    if len(messages) < 2 or messages[0].get("role") != "system" or messages[1].get("role") != "user":
        return messages
    first, user = messages[0], messages[1]
    if not isinstance(user.get("content"), str):
        return messages
    text = "\n\n".join(t for t in (text_of(first.get("content")), user["content"]) if t)
    return [{**user, "content": text}, *messages[2:]]


# -- the probes: a conversation each step is decided on ------------------------------------------------------

_ASK, _SAID, _NEXT = "Bravo question.", "Charlie answer.", "Echo question."


def _call(name: str) -> Message:
    return {
        "id": f"toolu_01probe_{name}",
        "type": "function",
        "function": {"name": "probe", "arguments": {"query": name}},
    }


def _result(name: str) -> Message:
    return {"role": "tool", "tool_call_id": f"toolu_01probe_{name}", "content": f"Result {name}."}


_SYSTEM: Message = {"role": "system", "content": "Alpha rules."}
PROBES: dict[str, list[Message]] = {
    # ends with the model's turn: a template that shows the system message only in a last user turn drops it here
    "system_in_user": [_SYSTEM, {"role": "user", "content": _ASK}, {"role": "assistant", "content": _SAID}],
    "short_ids": [
        _SYSTEM,
        {"role": "user", "content": _ASK},
        {"role": "assistant", "content": "", "tool_calls": [_call("one")]},
        _result("one"),
    ],
    "single_calls": [
        _SYSTEM,
        {"role": "user", "content": _ASK},
        {"role": "assistant", "content": "", "tool_calls": [_call("one"), _call("two")]},
        _result("one"),
        _result("two"),
    ],
    "user_into_tool": [
        _SYSTEM,
        {"role": "user", "content": _ASK},
        {"role": "assistant", "content": "", "tool_calls": [_call("one")]},
        _result("one"),
        {"role": "user", "content": _NEXT},
    ],
    "join_users": [_SYSTEM, {"role": "user", "content": _ASK}, {"role": "user", "content": _NEXT}],
}
STEPS: dict[str, Step] = {
    "system_in_user": system_in_user,
    "short_ids": short_ids,
    "single_calls": single_calls,
    "user_into_tool": user_into_tool,
    "join_users": join_users,
}


class Adapter:
    """The steps one template takes with one set of tools, and its late system messages' ways."""

    def __init__(self, render: ToolsRender, tools: Sequence[Mapping[str, Any]] | None) -> None:
        self._render = render
        self._tools = tools
        self.steps: tuple[str, ...] = self._decide()
        results = self.shape(PROBES["short_ids"])
        self.drops_results = self._renders(results) and not self._shows(results)
        self.turns = SystemTurns(lambda messages, generation: self.render(self.shape(messages), generation))

    def render(self, messages: list[Message], generation: bool) -> str:
        """Render ``messages`` (already adapted) with this adapter's tools."""
        return self._render(messages, self._tools, generation)

    def _renders(self, messages: list[Message]) -> bool:
        try:
            self.render(messages, True)
        except Exception:  # the template's refusal, whatever its type
            return False
        return True

    def _shows(self, messages: list[Message]) -> bool:
        """Whether ``messages`` render (as serving renders: the generation prompt) and show every text they hold."""
        try:
            prompt = self.render(messages, True)
        except Exception:  # the template's refusal, whatever its type
            return False
        return all(text in prompt for text in _texts(messages))

    def _decide(self) -> tuple[str, ...]:
        chosen: list[str] = []
        for name, step in STEPS.items():
            probe = self._apply(plain_content(PROBES[name]), chosen)
            if not self._shows(probe) and self._shows(step(probe)):
                chosen.append(name)
        return tuple(chosen)

    def _apply(self, messages: list[Message], steps: Sequence[str]) -> list[Message]:
        for name in steps:
            messages = STEPS[name](messages)
        return messages

    def shape(self, messages: list[Message]) -> list[Message]:
        """Return ``messages`` (system messages placed) with this template's steps applied."""
        return self._apply(plain_content(messages), self.steps)

    def adapt(self, messages: Sequence[Message]) -> list[Message]:
        """Return ``messages`` adapted: system messages placed, then every chosen step (a 400 where it cannot be)."""
        if self.drops_results and any(m.get("role") == "tool" for m in messages):
            raise template_refuses(
                "The chat template renders no tool results (messages of role 'tool'): the model would never see them"
            )
        return self.shape(self.turns.place(plain_content(list(messages))))

    def adaptations(self, messages: Sequence[Message]) -> list[str]:
        """Return the names of the steps and system-message ways that adapting ``messages`` uses."""
        used = list(self.steps)

        def noted(before: str) -> Way:
            way = self.turns.way(before)
            if f"late_system_{way}" not in used:
                used.append(f"late_system_{way}")
            return way

        place(plain_content(list(messages)), noted)
        return used


def _texts(messages: list[Message]) -> list[str]:
    """Return the texts of ``messages`` a rendering must show (the probes' words: plain text every template keeps)."""
    return [str(m["content"]) for m in messages if isinstance(m.get("content"), str) and m["content"]]


class Conversations:
    """The served template's adapters, one per set of tools (an agent sends the same tools every turn)."""

    def __init__(self, render: ToolsRender) -> None:
        self._render = render
        self._adapters: OrderedDict[str, Adapter] = OrderedDict()
        self._lock = threading.Lock()

    def adapter(self, tools: Sequence[Mapping[str, Any]] | None) -> Adapter:
        """Return the adapter for ``tools`` (decided by rendering the first time)."""
        key = json.dumps(tools, sort_keys=True, default=str) if tools else ""
        with self._lock:
            adapter = self._adapters.get(key)
            if adapter is not None:
                self._adapters.move_to_end(key)
                return adapter
        # Decided outside the lock (a large tool list takes tenths of a second): other requests go on meanwhile.
        # Two requests deciding at once decide alike (the rendering is deterministic); the first one kept wins.
        decided = Adapter(self._render, tools or None)
        with self._lock:
            adapter = self._adapters.setdefault(key, decided)
            self._adapters.move_to_end(key)
            while len(self._adapters) > KEPT_DECISIONS:
                self._adapters.popitem(last=False)
            return adapter

    def adapt(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None) -> list[Message]:
        """Return ``messages`` as the template should render them with ``tools``."""
        return self.adapter(tools).adapt(messages)

    def render(self, messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, generation: bool) -> str:
        """Render adapted ``messages`` as the worker does; a refusal is ``template_failed`` (a 400)."""
        try:
            return self._render(messages, tools or None, generation)
        except Exception as error:
            raise template_failed(error) from error


def unadapted(messages: Sequence[Message]) -> list[Message]:
    """Return ``messages`` with only the leading system messages joined (no template to render with)."""
    return place(list(messages), lambda _: "keep")


def for_provider(provider: Any) -> Conversations | None:
    """Return the ``Conversations`` of the loaded model's template (None without a chat template)."""
    tokenizer = getattr(provider, "tokenizer", None)
    if tokenizer is None or not getattr(tokenizer, "has_chat_template", False):
        return None
    defaults = dict(getattr(provider.cli_args, "chat_template_args", None) or {})

    def render(messages: list[Message], tools: Sequence[Mapping[str, Any]] | None, generation: bool) -> str:
        text = tokenizer.apply_chat_template(
            messages, tools=tools, tokenize=False, add_generation_prompt=generation, **defaults
        )
        return str(text)

    return Conversations(render)
