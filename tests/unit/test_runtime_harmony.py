"""Harmony replies split into reasoning, content and tool calls, as mlx_lm's handler collects them.

``collect`` follows mlx_lm 0.32.2's ``handle_completion`` loop: it feeds decoded text to the state machine,
adds each segment to the reasoning, the content or the current call, files a call when a ``normal`` segment
follows it, and ends with ``discard`` (a stop) or ``flush`` (``max_tokens``). Bare mlx_lm has no Harmony
machine: a gpt-oss reply is all content, markup included.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from mlx_lm.generate import TextStateMachine

from mlx_agent.runtime.reply import harmony
from mlx_agent.runtime.reply.harmony_calls import RAW_ARGUMENTS, parse_call, read_arguments
from mlx_agent.runtime.reply.harmony_serving import (
    HarmonyAwareTextStateMachine,
    HarmonyTextMachine,
    harmony_vocabulary,
    prompt_mode,
)
from mlx_agent.runtime.reply.tool_calls import KeepingToolCallFormatter, UnparsedToolCall

ANALYSIS = "<|channel|>analysis<|message|>"
FINAL = "<|start|>assistant<|channel|>final<|message|>"
CALL = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
PARIS = '{"city": "Paris"}'


@dataclass
class Reply:
    """What mlx_lm's handler makes of one reply."""

    reasoning: str = ""
    content: str = ""
    calls: list[str] = field(default_factory=list)


def collect(chunks: Sequence[str], *, cut: bool = False, initial: str = harmony.HEADER, stops: Any = ()) -> Reply:
    """Run the chunks through the machine as mlx_lm's handler does (module docstring)."""
    machine = HarmonyAwareTextStateMachine
    state = HarmonyTextMachine(list(stops)).make_state(initial)
    reply, call, previous = Reply(), "", initial
    for chunk in chunks:
        state, segments = machine.split(state, chunk)
        for name, text in segments:
            if name == "reasoning":
                reply.reasoning += text
            elif name == "tool":
                call += text
            elif name == "normal":
                if previous == "tool":
                    reply.calls.append(call)
                    call = ""
                reply.content += text
            previous = name or previous
    if cut:
        state, flushed, name = machine.flush(state)
        if name == "tool":
            call += flushed
        else:
            reply.content += flushed
    else:
        state, name = machine.discard(state)
    if name == "tool" and call:
        reply.calls.append(call)
    return reply


def pieces(text: str, size: int) -> list[str]:
    """Cut ``text`` into chunks of ``size`` characters (1: as a model writing one character per token)."""
    return [text[at : at + size] for at in range(0, len(text), size)]


def parsed(reply: Reply) -> list[dict[str, Any]]:
    """Return the reply's calls as the Harmony parser reads them."""
    return [parse_call(call) for call in reply.calls]


CHUNK_SIZES = pytest.mark.parametrize("size", [1, 2, 5, 1000])


@CHUNK_SIZES
def test_analysis_becomes_reasoning_and_final_becomes_content(size: int) -> None:
    """The analysis channel is the reasoning, the final channel the content; the markup is dropped."""
    reply = collect(pieces(f"{ANALYSIS}Think first.<|end|>{FINAL}It is sunny.", size))
    assert (reply.reasoning, reply.content, reply.calls) == ("Think first.", "It is sunny.", [])


@CHUNK_SIZES
def test_a_commentary_call_with_the_recipient_in_the_channel_header(size: int) -> None:
    """``to=functions.NAME`` in the channel header, with ``<|constrain|>json``, is a call to NAME."""
    reply = collect(pieces(f"{CALL}{PARIS}", size))
    assert parsed(reply) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    assert reply.calls == [f"{CALL}{PARIS}"]  # the call as written, for a harness to show back
    assert reply.content == reply.reasoning == ""


@CHUNK_SIZES
def test_a_call_with_the_recipient_in_the_role_header(size: int) -> None:
    """After ``<|start|>assistant`` the recipient may come before the channel, with a bare content type."""
    reply = collect(pieces(f" to=functions.get_weather<|channel|>commentary json<|message|>{PARIS}", size))
    assert parsed(reply) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    again = collect(pieces("<|start|>assistant to=functions.lookup<|channel|>commentary<|message|>{}", size))
    assert parsed(again) == [{"name": "lookup", "arguments": {}}]


@CHUNK_SIZES
def test_a_call_from_the_analysis_channel_is_a_call(size: int) -> None:
    """gpt-oss calls tools from its analysis channel too; that message is a call, not reasoning."""
    text = f"{ANALYSIS}Need data.<|end|><|start|>assistant<|channel|>analysis to=functions.f code<|message|>{{}}"
    reply = collect(pieces(text, size))
    assert reply.reasoning == "Need data."
    assert parsed(reply) == [{"name": "f", "arguments": {}}]


@CHUNK_SIZES
def test_a_preamble_before_a_call_stays_text(size: int) -> None:
    """A commentary message without a recipient is said to the user: it is content, and the call follows."""
    text = f"<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant{CALL}{PARIS}"
    reply = collect(pieces(text, size))
    assert reply.content == "Let me check."
    assert [call["name"] for call in parsed(reply)] == ["get_weather"]


def test_calls_ended_by_a_written_call_token_are_filed_one_by_one() -> None:
    """When ``<|call|>`` is written (not a stop token), each call is filed, and the reply goes on."""
    text = f"{CALL}{PARIS}<|call|><|start|>assistant{CALL}{{}}<|call|>{FINAL}Done."
    reply = collect([text])
    assert [call["arguments"] for call in parsed(reply)] == [{"city": "Paris"}, {}]
    assert reply.content == "Done."


def test_arguments_that_are_not_json_are_handed_over_as_written() -> None:
    """Text, a JSON value that is not an object, and a number JSON cannot hold all arrive under ``_raw``."""
    reply = collect(["<|channel|>commentary to=functions.shell <|constrain|>json<|message|>ls -la /tmp"])
    assert parsed(reply) == [{"name": "shell", "arguments": {RAW_ARGUMENTS: "ls -la /tmp"}}]
    assert read_arguments(" [1, 2] ") == {RAW_ARGUMENTS: "[1, 2]"}
    assert read_arguments('{"n": 1e400}') == {RAW_ARGUMENTS: '{"n": 1e400}'}
    assert read_arguments('{"n": NaN}') == {RAW_ARGUMENTS: '{"n": NaN}'}
    assert read_arguments("") == {}
    assert json.loads(json.dumps(read_arguments('{"n": 1.5}'))) == {"n": 1.5}


def test_a_recipient_outside_functions_keeps_its_name_and_people_are_not_tools() -> None:
    """``to=browser.search`` is a call named ``browser.search``; ``to=user`` is a message, not a call."""
    assert parsed(collect(["<|channel|>commentary to=browser.search<|message|>{}"]))[0]["name"] == "browser.search"
    reply = collect(["<|channel|>final to=user<|message|>Hello."])
    assert (reply.content, reply.calls) == ("Hello.", [])


def test_a_reply_without_headers_is_content() -> None:
    """Text that is not a header (JSON enforced from the first token, a model ignoring the format) is content."""
    assert collect(pieces('{"a": 1}', 1)).content == '{"a": 1}'
    assert collect(["Hello <|channel|> there"]).content == "Hello "
    assert collect(["to", "day"]).content == "today"


def test_a_header_that_never_ends_is_content() -> None:
    """Markup that never reaches ``<|message|>`` within a header's length is the model's text after all."""
    text = "<|channel|>" + "x" * harmony.MAX_HEADER_CHARS
    assert collect([text]).content == text


def test_stop_words_are_stripped_everywhere() -> None:
    """Stop words are removed from the text (mlx_lm ends the reply on them), in any channel."""
    reply = collect(pieces(f"{ANALYSIS}a STOP b<|end|>{FINAL}c STOP", 1), stops=["STOP"])
    assert (reply.reasoning, reply.content) == ("a  b", "c ")


def test_a_call_cut_by_max_tokens_is_marked_and_not_parsed() -> None:
    """A reply that reaches max_tokens inside a call (or its header) files text the parser refuses."""
    for text in (f'{CALL}{{"city": ', "<|channel|>commentary to=functions.get_weather <|const"):
        [call] = collect([text], cut=True).calls
        assert call.endswith(harmony.CUT_OFF)
        with pytest.raises(ValueError, match="max_tokens"):
            parse_call(call)
    assert collect([f"{FINAL}Half an ans"], cut=True).content == "Half an ans"
    assert collect([f"{FINAL}Half <|"], cut=True).content == "Half <|"  # held back, then written


def test_a_reply_that_stops_inside_a_call_files_it() -> None:
    """``<|call|>`` is a stop token: the reply stops inside the call, and the call is filed whole."""
    reply = collect([CALL, PARIS])
    assert parsed(reply) == [{"name": "get_weather", "arguments": {"city": "Paris"}}]


def test_calls_without_a_function_are_refused() -> None:
    """The parser refuses a call with no recipient or no message; the wrapper then returns it as written."""
    with pytest.raises(ValueError, match="names no function"):
        parse_call("<|channel|>commentary to=functions.<|message|>{}")
    with pytest.raises(ValueError, match=r"no <\|message\|>"):
        parse_call("<|channel|>commentary to=functions.f")


def test_a_cut_call_is_returned_as_written_without_the_cut_mark() -> None:
    """The formatter keeps a call the Harmony parser refused, without the mark that said it was cut off."""
    [kept] = KeepingToolCallFormatter(parse_call, None)([f'{CALL}{{"ci{harmony.CUT_OFF}'])
    assert isinstance(kept, UnparsedToolCall)
    assert kept["text"] == f'{CALL}{{"ci'
    assert "max_tokens" in kept["error"]


def test_the_prompt_decides_where_a_reply_starts() -> None:
    """After ``<|start|>assistant`` a header comes; a continued message goes on in its channel."""
    assert harmony.open_message("<|start|>assistant") == harmony.HEADER
    assert harmony.open_message(f"<|start|>assistant{ANALYSIS}Hm") == harmony.REASONING
    assert harmony.open_message(f"{FINAL}It is") == harmony.CONTENT
    assert harmony.open_message(f"<|start|>assistant{CALL}{{") == harmony.TOOL
    assert collect(["more thought<|end|>", FINAL, "Yes."], initial=harmony.REASONING).reasoning == "more thought"


def test_a_text_completion_is_not_split() -> None:
    """mlx_lm's own ``normal`` start (a text completion) passes everything through as content."""
    text = f"{ANALYSIS}raw<|end|>"
    assert collect([text], initial="normal").content == text


def test_headers_are_read_for_their_channel_and_recipient() -> None:
    """The channel is the word after ``<|channel|>``; the recipient follows ``to=`` in either part."""
    assert harmony.read_header("<|channel|>analysis") == harmony.Header("analysis", None)
    assert harmony.read_header("<|start|>assistant to=functions.f<|channel|>commentary json") == harmony.Header(
        "commentary", "functions.f"
    )
    assert harmony.read_header("to=functions.f<|constrain|>json") == harmony.Header(None, "functions.f")


def test_mlx_lm_states_still_take_mlx_lm_s_path() -> None:
    """The replaced ``TextStateMachine`` splits a non-Harmony state exactly as mlx_lm's own class does."""
    transitions = {"normal": [("<think>", "reasoning")], "reasoning": [("</think>", "normal")]}
    classes: tuple[Any, Any] = (HarmonyAwareTextStateMachine, TextStateMachine)  # mlx_lm's class is untyped
    ours, theirs = (cls(transitions) for cls in classes)
    text = "<think>a</think>b<thi"
    assert ours.split(ours.make_state(), text)[1] == theirs.split(theirs.make_state(), text)[1]
    state = ours.split(ours.make_state(), text)[0]
    assert ours.flush(state)[1:] == ("<thi", "normal")
    assert ours.discard(state)[1] == "normal"


class FakeTokenizer:
    """A tokenizer with a vocabulary and an encoder of one token per special word (enough for the detection)."""

    def __init__(self, words: Sequence[str]) -> None:
        self.vocab = {word: index for index, word in enumerate(words)}

    def get_vocab(self) -> dict[str, int]:
        """Return the vocabulary."""
        return self.vocab

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Encode ``text`` greedily by the longest word (the test words cover every text encoded)."""
        out, at = [], 0
        words = sorted(self.vocab, key=len, reverse=True)
        while at < len(text):
            word = next(w for w in words if text.startswith(w, at))
            out.append(self.vocab[word])
            at += len(word)
        return out

    def decode(self, ids: list[int]) -> str:
        """Decode ids back to their words."""
        words = {index: word for word, index in self.vocab.items()}
        return "".join(words[i] for i in ids)


HARMONY_WORDS = [*harmony.REQUIRED_TOKENS, "<|return|>", "assistant", "analysis", "final", "user", "hi"]


def test_a_tokenizer_speaks_harmony_when_it_has_the_tokens() -> None:
    """The Harmony tokens give the watcher its markers; a tokenizer without them is left to mlx_lm."""
    tokenizer = FakeTokenizer(HARMONY_WORDS)
    vocabulary = harmony_vocabulary(tokenizer)
    assert vocabulary is not None
    decode: Callable[[tuple[int, ...]], str] = lambda ids: tokenizer.decode(list(ids))  # noqa: E731
    assert decode(vocabulary.think_start) == ANALYSIS
    assert decode(vocabulary.think_end) == "<|end|>"
    assert decode(vocabulary.answer_header) == FINAL
    assert harmony_vocabulary(FakeTokenizer(["<|channel|>", "<|message|>", "hi"])) is None
    prompt = tokenizer.encode("<|start|>user<|message|>hi<|end|><|start|>assistant")
    assert prompt_mode(tokenizer, prompt, vocabulary) == harmony.HEADER
    assert prompt_mode(tokenizer, tokenizer.encode(f"<|start|>assistant{ANALYSIS}hi"), vocabulary) == "reasoning"


def test_install_gives_mlx_lm_s_handler_the_harmony_aware_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler calls ``TextStateMachine.split`` on mlx_lm.server's name: install points it at ours."""
    import mlx_lm.server

    from mlx_agent.runtime.reply import harmony_serving

    monkeypatch.setattr(mlx_lm.server, "TextStateMachine", TextStateMachine)
    harmony_serving.install()
    assert mlx_lm.server.TextStateMachine is HarmonyAwareTextStateMachine  # type: ignore[attr-defined]
