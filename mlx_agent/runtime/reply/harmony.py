"""Harmony, the message format gpt-oss writes, split into reasoning, content and tool calls as text arrives.

Pure: no mlx. A Harmony reply is a series of messages, each a header and a body::

    <|start|>ROLE[ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ [<|constrain|>]TYPE]<|message|>BODY<|end|>

The generation prompt already wrote ``<|start|>assistant``, so the reply's first header starts at the role's
recipient or at ``<|channel|>``. A body ends at ``<|end|>``, ``<|call|>`` (a tool call) or ``<|return|>`` (the
final answer), the last two being stop tokens of gpt-oss; a new ``<|start|>`` or ``<|channel|>`` also ends it.
A message is routed by its header:

* it names a recipient (``to=functions.NAME``, in the role or the channel part, from any channel: gpt-oss calls
  tools from its analysis channel too): a **tool call**, whose text is the message as written, header included;
* else the ``analysis`` channel: **reasoning**;
* else (``final``, a ``commentary`` preamble, any other channel): **content**.

Text outside any message (a reply that writes no header, such as JSON enforced from the first token) is content.
Header markup is dropped. The splitter speaks mlx_lm's ``TextStateMachine`` dialect: ``split`` returns segments
``(state, text)`` with mlx_lm's state names (``reasoning``, ``normal``, ``tool``), the last one the current
state; a call is filed when a ``normal`` segment follows it; ``flush`` ends a reply cut by ``max_tokens``,
``discard`` one that stopped. A call cut by ``max_tokens`` ends with ``CUT_OFF``, so the parser refuses it and
the wrapper returns it as written (docs/wrapped-server.md, "Tool calls the parser cannot read").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
END = "<|end|>"
CALL = "<|call|>"
RETURN = "<|return|>"
# A tokenizer speaks Harmony when it has these (``<|constrain|>`` and ``<|return|>`` are read when written).
REQUIRED_TOKENS = (START, CHANNEL, MESSAGE, END, CALL)
ANALYSIS = "analysis"
ANSWER_HEADER = f"{START}assistant{CHANNEL}final{MESSAGE}"  # what follows a thinking closed by a limit
THINKING_HEADER = f"{CHANNEL}{ANALYSIS}{MESSAGE}"

# Modes of the splitter. ``raw`` passes everything as content (a text completion is not a conversation).
HEADER, REASONING, CONTENT, TOOL, RAW = "header", "reasoning", "content", "tool", "raw"
MODES = (HEADER, REASONING, CONTENT, TOOL, RAW)
# mlx_lm's state names, as its handler collects them.
_REPORTED = {HEADER: "normal", REASONING: "reasoning", CONTENT: "normal", TOOL: "tool", RAW: "normal"}

# Appended to a call cut off by max_tokens: a noncharacter, never in text a model writes.
CUT_OFF = "\ufdd0"
# Recipients that are people, not tools.
NOT_TOOLS = frozenset({"all", "user", "assistant"})
# A header longer than this was never one (a model that writes markup as prose): it is content.
MAX_HEADER_CHARS = 512

_HEADER_MARKERS = (START, CHANNEL, CONSTRAIN, MESSAGE, END, CALL, RETURN)
_BODY_MARKERS = (START, CHANNEL, END, CALL, RETURN)
_RECIPIENT = re.compile(r"(?:^|[\s>])to=([^\s<]+)")
_CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"\s*([^\s<]+)")

Segment = tuple[str, str]


@dataclass(frozen=True)
class Header:
    """What a message header says: its channel and its recipient (either may be missing)."""

    channel: str | None
    recipient: str | None

    @property
    def calls_a_tool(self) -> bool:
        """Whether the message is a tool call: it names a recipient that is not a person."""
        return bool(self.recipient) and self.recipient not in NOT_TOOLS


def read_header(header: str) -> Header:
    """Read a message header as written (without its ``<|message|>``)."""
    recipient = _RECIPIENT.search(header)
    channel = _CHANNEL_NAME.search(header)
    return Header(channel.group(1) if channel else None, recipient.group(1) if recipient else None)


@dataclass(frozen=True)
class HarmonyState:
    """Where a reply's splitting stands; immutable, like mlx_lm's text states."""

    mode: str = HEADER
    header: str = ""  # the header so far, as written (mode ``header``)
    pending: str = ""  # text held back because it may begin a marker
    stop_words: tuple[str, ...] = ()  # stripped wherever they appear, as mlx_lm strips them


def start(initial: str = HEADER, stop_words: tuple[str, ...] = ()) -> HarmonyState:
    """Return the state a reply starts in; an unknown ``initial`` (mlx_lm's ``normal``) splits nothing."""
    return HarmonyState(initial if initial in MODES else RAW, stop_words=tuple(w for w in stop_words if w))


def header_kind(header: str) -> str:
    """Say whether text in header position is a ``header``, plain ``text``, or still ``undecided``."""
    written = header.lstrip()
    if not written:
        return "undecided"
    if written.startswith((START, CHANNEL, CONSTRAIN, "to=")):
        return "header" if len(header) <= MAX_HEADER_CHARS else "text"
    return "undecided" if "to=".startswith(written) else "text"


class _Reader:
    """One ``split``: the state being changed and the segments written."""

    def __init__(self, state: HarmonyState) -> None:
        self.mode = state.mode
        self.header = state.header
        self.stop_words = state.stop_words
        self.segments: list[Segment] = []

    @property
    def markers(self) -> tuple[str, ...]:
        if self.mode == RAW:
            return self.stop_words
        return (_HEADER_MARKERS if self.mode == HEADER else _BODY_MARKERS) + self.stop_words

    def emit(self, mode: str, text: str) -> None:
        state = _REPORTED[mode]
        if self.segments and self.segments[-1][0] == state and text:
            self.segments[-1] = (state, self.segments[-1][1] + text)
        else:
            self.segments.append((state, text))

    def text(self, text: str) -> None:
        if not text:
            return
        if self.mode != HEADER:
            self.emit(self.mode, text)
            return
        self.header += text
        if header_kind(self.header) == "text":
            written, self.header, self.mode = self.header, "", CONTENT
            self.emit(CONTENT, written)

    def marker(self, marker: str) -> None:
        if marker in self.stop_words:
            return
        if self.mode == HEADER:
            if marker == MESSAGE:
                self.open()
            elif marker in (CHANNEL, CONSTRAIN):
                self.header += marker
            else:  # a new message, or an empty one ended
                self.header = START if marker == START else ""
            return
        if self.mode == TOOL:
            self.emit(CONTENT, "")  # the call is complete: mlx_lm files it on the next normal segment
        self.mode = HEADER
        self.header = marker if marker in (START, CHANNEL) else ""

    def open(self) -> None:
        """Start the body of the message whose header is complete."""
        written, self.header = self.header, ""
        header = read_header(written)
        if header.calls_a_tool:
            self.mode = TOOL
            self.emit(TOOL, written + MESSAGE)
        else:
            self.mode = REASONING if header.channel == ANALYSIS else CONTENT
            self.emit(self.mode, "")

    def state(self, pending: str) -> HarmonyState:
        reported = _REPORTED[self.mode]
        if not self.segments or self.segments[-1][0] != reported:
            self.segments.append((reported, ""))
        return HarmonyState(self.mode, self.header, pending, self.stop_words)


def split(state: HarmonyState, text: str) -> tuple[HarmonyState, list[Segment]]:
    """Consume a chunk of decoded text; return the new state and the segments, the last one the current state."""
    reader = _Reader(state)
    written = state.pending + text
    at = 0
    while (found := _first_marker(written, at, reader.markers)) is not None:
        where, marker = found
        reader.text(written[at:where])
        reader.marker(marker)
        at = where + len(marker)
    rest = written[at:]
    held = _held_back(rest, reader.markers)
    reader.text(rest[: len(rest) - held])
    return reader.state(rest[len(rest) - held :]), reader.segments


def flush(state: HarmonyState) -> tuple[HarmonyState, str, str]:
    """End a reply cut by ``max_tokens``: return the state, the text held back, and the state it belongs to."""
    if state.mode == HEADER:
        header = state.header + state.pending
        if header_kind(header) == "text":
            return replace(state, mode=CONTENT, header="", pending=""), header, "normal"
        if read_header(header).calls_a_tool:
            return replace(state, mode=TOOL, header="", pending=""), header + CUT_OFF, "tool"
        return replace(state, header="", pending=""), "", "normal"
    tail = state.pending + (CUT_OFF if state.mode == TOOL else "")
    return replace(state, pending=""), tail, _REPORTED[state.mode]


def discard(state: HarmonyState) -> tuple[HarmonyState, str]:
    """End a reply that stopped: drop the text held back; return the state and its name."""
    return replace(state, pending=""), _REPORTED[state.mode]


def open_message(tail: str) -> str:
    """Return the mode a reply starts in after a prompt ending with ``tail`` (its text from the last ``<|start|>``).

    ``<|start|>assistant`` opens a fresh header; a prompt that continues a message (``continue_final_message``)
    starts in that message's body.
    """
    state, _ = split(start(HEADER), tail)
    return state.mode


def _first_marker(text: str, at: int, markers: tuple[str, ...]) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for marker in markers:
        where = text.find(marker, at)
        if where >= 0 and (best is None or where < best[0] or (where == best[0] and len(marker) > len(best[1]))):
            best = (where, marker)
    return best


def _held_back(text: str, markers: tuple[str, ...]) -> int:
    """Return the length of the longest end of ``text`` that begins a marker (and must wait for more text)."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest
