r"""Every corpus family's tool calls read exactly: our parsers installed through mlx_lm's own selection, its own fixed.

mlx_lm's ``tokenizer_utils.load`` asks ``_infer_tool_parser(tokenizer)`` for a parser name, then imports
``mlx_lm.tool_parsers.<name>`` and reads its ``parse_tool_call``, ``tool_call_start`` and ``tool_call_end``.
``install`` (idempotent, before the model loads) extends that one road rather than adding a second:

* our parsers (``reply/parsers/``: ``deepseek_v3``, ``llama3_json``) are importable under that name, and
  ``_infer_tool_parser`` is wrapped so that mlx_lm's answer stands and ours (``tool_formats.our_parser_for``, the
  declaration the plan reads too) is used only where it has none;
* Mistral Small 3.2 writes ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}``, where mlx_lm's header reader takes the id
  for the name: ``header_calls`` replaces that reader (``mistral._parse_header_calls``), reading the name, the
  model's id (kept as the call's id) and the arguments;
* GLM-4.6/4.7 and MiniMax M2 write a string argument as it is, between tags, and mlx_lm strips its whitespace
  (an Edit's ``old_string`` ``"x = 1\n"`` arrived as ``"x = 1"``): their ``parse_tool_call`` is wrapped so that a
  string value mlx_lm read is the text between the tags exactly (``exact_strings``);
* a GLM or Kimi K2 call cut by max_tokens inside a tag pair came back as a call (GLM's without the cut argument,
  Kimi's named after its markers): it raises instead (``whole``), so the formatter keeps it as text;
* mlx_lm's text machine knows one start marker per parser; a parser module of ours that names more
  (``TOOL_CALL_STARTS``: Llama's ``{"name":`` and ``<|python_tag|>``) gets them all as ways into the tool state:
  ``mlx_lm.server.make_text_state_machine`` is wrapped to hand mlx_lm's own builder a view of the tokenizer whose
  response transitions carry them (``CallStarts``), the road mlx_lm gives a response format.

A call no parser reads stays visible: the ``unparsed_tool_calls`` marker (``tool_calls``), a log line, and the
front's ``mlx_agent_unparsed_tool_calls_total`` counter.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from mlx_agent.tool_formats import OUR_PARSERS, our_parser_for

TOOL_PARSERS = "mlx_lm.tool_parsers"
WRAPPED = "mlx_agent_family_parsers"  # marks what install wrapped, so that installing twice wraps once
# Mistral's header, with the id Mistral Small 3.2 writes between the name and the arguments.
MISTRAL_HEADER = re.compile(r"([\w.-]+)(?:\s*\[CALL_ID\]\s*([\w-]+))?\s*\[ARGS\]\s*")

Parse = Callable[..., Any]


def install() -> None:
    """Install our parsers and fixes into mlx_lm (module docstring); idempotent."""
    for name in OUR_PARSERS:
        sys.modules.setdefault(
            f"{TOOL_PARSERS}.{name}", importlib.import_module(f"mlx_agent.runtime.reply.parsers.{name}")
        )
    tokenizer_utils = importlib.import_module("mlx_lm.tokenizer_utils")
    infer = tokenizer_utils._infer_tool_parser
    if not getattr(infer, WRAPPED, False):
        setattr(tokenizer_utils, "_infer_tool_parser", with_our_parsers(infer))  # noqa: B010  (the seam)
    server = importlib.import_module("mlx_lm.server")
    if not getattr(server.make_text_state_machine, WRAPPED, False):
        setattr(server, "make_text_state_machine", with_call_starts(server.make_text_state_machine))  # noqa: B010
    mistral = importlib.import_module(f"{TOOL_PARSERS}.mistral")
    setattr(mistral, "_parse_header_calls", header_calls)  # noqa: B010  (the seam)
    for module_name, wrap in WRAPS.items():
        module = importlib.import_module(f"{TOOL_PARSERS}.{module_name}")
        parse = getattr(module, "parse_tool_call")  # noqa: B009  (untyped upstream)
        if not getattr(parse, WRAPPED, False):
            setattr(module, "parse_tool_call", wrap(module, parse))  # noqa: B010  (the seam)


def with_call_starts(make: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``make_text_state_machine(tokenizer, stop_words)`` to give a parser's every start marker to mlx_lm's."""

    @functools.wraps(make)
    def build(tokenizer: Any, stop_words: Any = None) -> Any:
        starts = call_starts(tokenizer)
        return make(CallStarts(tokenizer, starts) if starts else tokenizer, stop_words)

    setattr(build, WRAPPED, True)
    return build


def call_starts(tokenizer: Any) -> tuple[str, ...]:
    """Return the start markers the tokenizer's parser module declares beyond ``tool_call_start`` (or none)."""
    parser = getattr(tokenizer, "tool_parser", None)
    module = sys.modules.get(getattr(parser, "__module__", "") or "")
    starts: tuple[str, ...] = getattr(module, "TOOL_CALL_STARTS", ())
    return starts if len(starts) > 1 else ()


class CallStarts:
    """A tokenizer as mlx_lm's text-machine builder reads it, with a transition into ``tool`` for each start."""

    def __init__(self, tokenizer: Any, starts: tuple[str, ...]) -> None:
        self._tokenizer = tokenizer
        self._starts = starts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    @property
    def response_transitions(self) -> dict[str, list[tuple[str, str]]]:
        """Return the tokenizer's own transitions plus ``normal -> tool`` on every start marker.

        A response format that goes to ``tool`` decides where calls start, so mlx_lm adds no edge of its own
        from ``normal`` (it still adds ``reasoning -> tool`` on ``tool_call_start``; the others are added here).
        """
        transitions = {state: list(edges) for state, edges in self._tokenizer.response_transitions.items()}
        transitions.setdefault("normal", []).extend((start, "tool") for start in self._starts)
        if self._tokenizer.has_thinking:
            transitions.setdefault("reasoning", []).extend((start, "tool") for start in self._starts[1:])
        return transitions


def with_our_parsers(infer: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    """Wrap ``_infer_tool_parser``: mlx_lm's choice, else ours for the tokenizer's chat template."""

    @functools.wraps(infer)
    def choose(tokenizer: Any) -> str | None:
        chosen = infer(tokenizer)
        if chosen is not None:
            return chosen
        template = getattr(tokenizer, "chat_template", None)
        return our_parser_for(template) if isinstance(template, str) else None

    setattr(choose, WRAPPED, True)
    return choose


def header_calls(text: str) -> list[dict[str, Any]]:
    """Read Mistral's ``NAME[ARGS]{...}`` calls (repeated), with Small 3.2's ``[CALL_ID]ID`` kept as the id."""
    decoder = json.JSONDecoder()
    calls: list[dict[str, Any]] = []
    at = 0
    while (match := MISTRAL_HEADER.search(text, at)) is not None:
        try:
            arguments, at = decoder.raw_decode(text, match.end())
        except json.JSONDecodeError as error:  # the template writes valid JSON: the reply was cut short
            raise ValueError(f"Could not parse tool call from: {text}") from error
        call: dict[str, Any] = {"name": match.group(1), "arguments": arguments}
        if match.group(2):
            call["id"] = match.group(2)
        calls.append(call)
    return calls


def exact_strings(parse: Parse, raw_values: Callable[[str], list[dict[str, str]]]) -> Parse:
    """Wrap a parser so that each string value it read is the text the model wrote for it, whitespace and all.

    ``raw_values(text)`` gives, per call in the parser's order, each argument's text as written. A value is
    replaced only when it is a string equal to that text stripped (what mlx_lm's GLM and MiniMax readers make of
    it), so a value the parser read as JSON (a quoted string, a number) stays the parser's.
    """

    @functools.wraps(parse)
    def read(text: str, tools: Any = None) -> Any:
        parsed = parse(text, tools)
        calls = parsed if isinstance(parsed, list) else [parsed]
        written = raw_values(text)
        if len(written) != len(calls):  # the parser skipped something: leave its reading alone
            return parsed
        for call, raw in zip(calls, written, strict=True):
            arguments = call.get("arguments") if isinstance(call, dict) else None
            if not isinstance(arguments, dict):
                continue
            for key, value in arguments.items():
                text_ = raw.get(key)
                if isinstance(value, str) and text_ is not None and text_.strip() == value:
                    arguments[key] = text_
        return parsed

    setattr(read, WRAPPED, True)
    return read


def whole(parse: Parse, pairs: tuple[tuple[str, str], ...]) -> Parse:
    """Wrap a parser so that a call cut inside a tag pair (an opening without its closing) raises, kept as text.

    mlx_lm's GLM reader drops an argument whose ``</arg_value>`` never came, and returns the call without it;
    its Kimi K2 reader reads a call without its ``<|tool_call_end|>`` as one named after the markers before it.
    """

    @functools.wraps(parse)
    def read(text: str, tools: Any = None) -> Any:
        for opening, closing in pairs:
            if text.count(opening) != text.count(closing):
                raise ValueError(f"a tool call cut short: {opening} without {closing}")
        return parse(text, tools)

    setattr(read, WRAPPED, True)
    return read


def glm_values(module: Any, text: str) -> list[dict[str, str]]:
    """Return the one GLM call's argument texts as written, by glm47's own pattern (keys stripped as it does)."""
    return [{match.group(1).strip(): match.group(2) for match in module._func_arg_regex.finditer(text)}]


def minimax_values(module: Any, text: str) -> list[dict[str, str]]:
    """Return each MiniMax invoke's parameter texts as written, by minimax_m2's own patterns and name reader."""
    return list(_minimax_invokes(module, text))


def _minimax_invokes(module: Any, text: str) -> Iterator[dict[str, str]]:
    for invoke in module._invoke_complete_regex.findall(text):
        if not re.search(r"^([^>]+)", invoke):  # skipped by the parser too
            continue
        values: dict[str, str] = {}
        for match in module._parameter_complete_regex.findall(invoke):
            found = re.search(r"^([^>]+)>(.*)", match, re.DOTALL)
            if found:
                values[module._extract_name(found.group(1))] = found.group(2)
        yield values


GLM_PAIRS = (("<arg_key>", "</arg_key>"), ("<arg_value>", "</arg_value>"))
KIMI_PAIRS = (("<|tool_call_begin|>", "<|tool_call_end|>"),)
# mlx_lm's parsers wrapped, by module under mlx_lm.tool_parsers: (module, its parse_tool_call) -> ours.
WRAPS: dict[str, Callable[[Any, Parse], Parse]] = {
    "glm47": lambda module, parse: whole(exact_strings(parse, functools.partial(glm_values, module)), GLM_PAIRS),
    "minimax_m2": lambda module, parse: exact_strings(parse, functools.partial(minimax_values, module)),
    "kimi_k2": lambda module, parse: whole(parse, KIMI_PAIRS),
}
# Every (module, attribute) install replaces, for whoever must put mlx_lm back (tests).
REPLACED: tuple[tuple[str, str], ...] = (
    ("mlx_lm.tokenizer_utils", "_infer_tool_parser"),
    ("mlx_lm.server", "make_text_state_machine"),
    (f"{TOOL_PARSERS}.mistral", "_parse_header_calls"),
    *((f"{TOOL_PARSERS}.{module}", "parse_tool_call") for module in WRAPS),
)
