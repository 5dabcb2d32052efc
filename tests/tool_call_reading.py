"""A tool-call case read as the worker reads it (no tests here): ``tests/tool_call_cases.py`` holds the cases.

``read`` runs a case through mlx_lm's ``tokenizer_utils.load`` on a tokenizer carrying the family's template and
markers (so the parser is chosen by mlx_lm's selection, with ours installed by ``family_parsers.install``), the
prompt rendered by that tokenizer (its last think marker decides the first state, as mlx_lm's ``_tokenize``
does), the reply fed token by token through ``make_text_state_machine`` and collected per state as mlx_lm's
``handle_completion`` loop does, then our ``KeepingToolCallFormatter`` and the handler's return of what did not
parse to the content. ``exact`` says whether the client got what the case wants.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.template_corpus import template
from tests.tool_call_cases import FAMILIES, THINKING, THINKING_END, TOOLS, Case, Family, cases, expected_calls
from tests.tool_call_writers import Call


@dataclass
class Reply:
    """What the handler would send: the calls parsed (OpenAI shape), the kept ones, content, reasoning."""

    calls: list[dict[str, Any]]
    unparsed: list[dict[str, str]]
    content: str
    reasoning: str


def tokenizer_for(family: Family, folder: Path) -> Any:
    """Return mlx_lm's ``TokenizerWrapper`` for a tokenizer with the family's template and special tokens."""
    from mlx_lm import tokenizer_utils
    from tokenizers import Tokenizer, models, pre_tokenizers

    real = template(family.template)
    words = {"[UNK]": 0}
    raw = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = list(dict.fromkeys([*family.specials, *(t for t in (real.bos_token, real.eos_token) if t)]))
    raw.add_special_tokens(specials)
    folder.mkdir(parents=True, exist_ok=True)
    raw.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": real.source,
        "bos_token": real.bos_token or None,
        "eos_token": real.eos_token or specials[-1],
        "unk_token": "[UNK]",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return tokenizer_utils.load(folder)


def first_state(tokenizer: Any) -> str:
    """Return the state a reply starts in, as mlx_lm's ``_tokenize`` decides it from the rendered prompt."""
    if not tokenizer.has_thinking:
        return "normal"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What time is it in Tokyo?"}],
        tools=TOOLS,
        add_generation_prompt=True,
        tokenize=False,
    )
    start, end = prompt.rfind(tokenizer.think_start), prompt.rfind(tokenizer.think_end)
    return "reasoning" if start > end else "normal"


def pieces(text: str, specials: Sequence[str]) -> Iterator[str]:
    """Yield ``text`` as a model's tokens arrive: each special token whole, other text three characters at a time."""
    pattern = "(" + "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)) + ")"
    for part in re.split(pattern, text) if specials else [text]:
        if part in specials:
            yield part
        else:
            yield from (part[i : i + 3] for i in range(0, len(part), 3))


def read(family: Family, case: Case, tokenizer: Any) -> Reply:
    """Run ``case`` as the worker's handler does (module docstring) and return what it would send."""
    from mlx_agent.runtime.reply.tool_calls import KeepingToolCallFormatter, as_written, split_calls

    initial = first_state(tokenizer)
    text = case.text
    if tokenizer.has_thinking:
        opened = "" if initial == "reasoning" else tokenizer.think_start
        text = text.replace(THINKING, opened).replace(THINKING_END, tokenizer.think_end)
        if initial == "reasoning" and tokenizer.think_end not in text:
            text = tokenizer.think_end + text  # a reply to a prompt that opened the thinking closes it first
    server: Any = importlib.import_module("mlx_lm.server")  # its names as the worker's handler finds them
    machine = server.make_text_state_machine(tokenizer, [])
    state = machine.make_state(initial)
    split, flush, discard = (
        server.TextStateMachine.split,
        server.TextStateMachine.flush,
        server.TextStateMachine.discard,
    )
    previous, content, reasoning, tool_text = initial, "", "", ""
    tool_calls: list[str] = []

    def collect(segments: Sequence[tuple[str | None, str]]) -> None:
        nonlocal previous, content, reasoning, tool_text
        for current, clean in segments:  # mlx_lm's handle_completion, state by state
            if current == "reasoning":
                reasoning += clean
            elif current == "tool":
                tool_text += clean
            elif current == "normal":
                if previous == "tool":
                    tool_calls.append(tool_text)
                    tool_text = ""
                content += clean
            previous = current  # type: ignore[assignment]

    markers = [*family.specials, *(m for m in (tokenizer.tool_call_start, tokenizer.tool_call_end) if m)]
    for piece in pieces(text, markers):
        state, segments = split(state, piece)
        collect(segments)
    if case.cut:
        state, flushed, current = flush(state)
        collect([(current, flushed)])
    else:
        state, current = discard(state)
        collect([(current, "")])
    if previous == "tool" and tool_text:
        tool_calls.append(tool_text)
    formatted = KeepingToolCallFormatter(tokenizer.tool_parser, TOOLS)(tool_calls)
    parsed, unparsed = split_calls(formatted)
    for index, call in enumerate(unparsed):  # the handler's generate_response: what did not parse is content
        last = index == len(unparsed) - 1
        content += as_written(call, tokenizer.tool_call_start, tokenizer.tool_call_end, not (case.cut and last))
    marked = [dict(u) for u in unparsed if getattr(u, "marked", True)]  # (main has no PlainText: all marked)
    return Reply(parsed, marked, content, reasoning)


def exact(family: Family, case: Case, reply: Reply) -> bool:
    """Whether ``reply`` is what a client must get for ``case``: every call exact, the text kept, nothing else."""
    want = expected_calls(family, case)
    got = [
        Call(c["function"]["name"], json.loads(c["function"]["arguments"]), c["id"] if _own_id(c["id"]) else None)
        for c in reply.calls
    ]
    if [(c.name, c.arguments, c.id) for c in got] != [(c.name, c.arguments, c.id) for c in want]:
        return False
    if case.cut:
        return bool(reply.unparsed)  # the call as written, with the marker, never silently dropped
    return not reply.unparsed and reply.content.strip() == case.content.strip()


def _own_id(call_id: str) -> bool:
    """Whether an id is the model's own (mlx_lm gives a call without one a fresh uuid4)."""
    return not re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", call_id)


@contextlib.contextmanager
def installed(fixed: bool = True) -> Iterator[None]:
    """Install what the worker installs into mlx_lm's parsing, and put mlx_lm back as it was on exit.

    ``fixed=False`` leaves ``family_parsers`` out: mlx_lm's parsers as the worker had them before it.
    """
    from mlx_agent.runtime.reply import lenient_tools

    places = [*lenient_tools.TYPED_READERS.items(), *lenient_tools.TEXT_KEEPING_READERS.items()]
    ours: list[str] = []
    if fixed:
        from mlx_agent.runtime.reply import family_parsers
        from mlx_agent.tool_formats import OUR_PARSERS

        places += family_parsers.REPLACED
        ours = [f"mlx_lm.tool_parsers.{name}" for name in OUR_PARSERS]
    saved = [(importlib.import_module(module), name) for module, name in places]
    values = [getattr(module, name) for module, name in saved]
    modules = {name: sys.modules.get(name) for name in ours}
    try:
        lenient_tools.install()
        if fixed:
            family_parsers.install()
        yield
    finally:
        for (module, name), value in zip(saved, values, strict=True):
            setattr(module, name, value)
        for name, module_ in modules.items():
            if module_ is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module_


def results(families: Sequence[Family] = FAMILIES, fixed: bool = True) -> Iterator[tuple[Family, Case, Reply, bool]]:
    """Yield every case of every family with the reply the worker's path gives and whether it is exact.

    ``fixed=False`` leaves ``family_parsers`` out (mlx_lm's parsers as the worker had them before it), in a
    process where it was never installed.
    """
    with installed(fixed), tempfile.TemporaryDirectory(prefix="families-") as folder:
        for index, family in enumerate(families):
            tokenizer = tokenizer_for(family, Path(folder) / str(index))
            for case in cases(family):
                reply = read(family, case, tokenizer)
                yield family, case, reply, exact(family, case, reply)
