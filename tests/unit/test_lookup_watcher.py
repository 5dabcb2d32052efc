"""The reply watcher under prompt lookup: marks and restores, held log lines, drafts it steers, native identity."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from mlx_agent.runtime.accel.lookup_verify import WatchedChoices
from mlx_agent.runtime.accel.prompt_lookup import LookupDecoder
from mlx_agent.runtime.reply import structured
from mlx_agent.runtime.reply.watcher import CHECK_EVERY, Grammar, ReplyWatcher, Vocabulary
from mlx_agent.runtime.serving.generator import WrappedGenerator
from mlx_agent.runtime.serving.limits import Limits
from mlx_agent.runtime.serving.request_options import RequestOptions

EOS, THINK, UNTHINK, WAIT, WORD = 0, 1, 2, 3, 4
PIECES = {EOS: "", THINK: "<think>", UNTHINK: "</think>", WAIT: " Wait,", WORD: " word"}
VOCAB = Vocabulary(width=8, eos=(EOS,), think_start=(THINK,), think_end=(UNTHINK,), piece=PIECES.__getitem__)
PROMPT = [7, 7, 7]
NO_TEXT = Limits(hedge_limit=0, repeat_limit=0)
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
    "required": ["name", "n"],
    "additionalProperties": False,
}
CODE = (
    "def fibonacci(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n\nclass Stack:\n    def push(self, item: int) -> None:\n        self.items.append(item)\n"
)
PROMPTS = {"code_edit": f"Rewrite this code:\n{CODE}\nHere it is:\n{CODE[:60]}", "chat": "Why is the sky blue?"}


def reader(history: list[int]) -> Callable[[int, int], list[int]]:
    """Return a reader of ``history`` for ``ReplyWatcher.allowed``."""
    return lambda lo, hi: history[lo:hi]


def call(watcher: ReplyWatcher, reply: list[int]) -> Any:
    """Ask the watcher what may follow the prompt and ``reply``; return its row (None: anything)."""
    history = PROMPT + reply
    return watcher.allowed(len(history), reader(history), VOCAB.width)


def test_restoring_a_mark_takes_back_a_forced_end_of_thinking() -> None:
    """After a restore the watcher is in the thinking again, and steers as if the later tokens never came."""
    watcher = ReplyWatcher(VOCAB, Limits(reasoning_budget=3, hedge_limit=0, repeat_limit=0), 64, thinking_open=True)
    for length in range(3):
        assert call(watcher, [WORD] * length) is None
    mark = watcher.mark()
    forced = call(watcher, [WORD] * 3)
    assert forced is not None and forced.tolist() == [t == UNTHINK for t in range(VOCAB.width)]
    call(watcher, [WORD] * 3 + [UNTHINK])
    assert watcher.phase == "answer"
    watcher.restore(mark)
    assert watcher.phase == "thinking"
    assert call(watcher, [WORD] * 3) is not None  # the budget runs out at the same token again
    fresh = ReplyWatcher(VOCAB, Limits(reasoning_budget=3, hedge_limit=0, repeat_limit=0), 64, thinking_open=True)
    for length in range(4):
        call(fresh, [WORD] * length)
    assert watcher.mark() == fresh.mark()


def test_a_mark_is_a_value_that_later_tokens_do_not_change() -> None:
    """Marks are copies: stepping on does not change one, and it can be restored more than once."""
    watcher = ReplyWatcher(VOCAB, NO_TEXT, 64, thinking_open=False)
    call(watcher, [])
    mark = watcher.mark()
    before = (mark.state.phase, mark.reply_length)
    for attempt in ([WORD, WORD], [THINK, WORD]):
        for length in range(1, len(attempt) + 1):
            call(watcher, attempt[:length])
        assert (mark.state.phase, mark.reply_length) == before
        watcher.restore(mark)
        assert watcher.phase == "start"
    call(watcher, [THINK])
    assert watcher.phase == "thinking"


def test_restoring_rewinds_the_read_schedule() -> None:
    """Hedges written after a restore are judged at the same check as before: the reading schedule is rewound."""
    watcher = ReplyWatcher(VOCAB, Limits(hedge_limit=3, repeat_limit=0, limit_answers=True), 64, thinking_open=False)

    def cut_at() -> int:
        for length in range(2, 4 * CHECK_EVERY):
            call(watcher, [WORD] + [WAIT] * (length - 1))
            if watcher.cut is not None:
                return length
        return 0

    call(watcher, [])
    call(watcher, [WORD])
    mark = watcher.mark()
    first = cut_at()
    watcher.restore(mark)
    assert watcher.cut is None
    assert cut_at() == first == CHECK_EVERY


def test_held_lines_are_logged_only_for_kept_positions(caplog: pytest.LogCaptureFixture) -> None:
    """A judgement on a taken-back position is never logged; one on a kept position is logged once, on release."""
    watcher = ReplyWatcher(VOCAB, Limits(reasoning_budget=2, hedge_limit=0, repeat_limit=0), 64, thinking_open=True)
    with caplog.at_level(logging.INFO):
        watcher.hold()
        call(watcher, [])
        call(watcher, [WORD])
        mark = watcher.mark()
        call(watcher, [WORD, WORD])  # spends the budget: a held line
        watcher.restore(mark)
        watcher.release()
        assert "reasoning budget" not in caplog.text
        watcher.hold()
        call(watcher, [WORD, WORD])
        assert "reasoning budget" not in caplog.text
        watcher.release()
    assert caplog.text.count("spent its reasoning budget of 2 tokens") == 1


def test_a_draft_is_cut_where_the_watcher_rules_its_token_out() -> None:
    """A draft token the watcher forbids ends the draft there; the masks cover the positions that remain."""
    watcher = ReplyWatcher(VOCAB, Limits(reasoning_budget=2, hedge_limit=0, repeat_limit=0), 64, thinking_open=True)
    choices = WatchedChoices(watcher, VOCAB.width)
    draft, masks = choices.draft(PROMPT, [WORD, WORD, WORD, WORD])
    assert draft == [WORD, WORD]  # the third token must be </think>
    assert masks is not None and masks.shape == (3, VOCAB.width)
    assert masks[:2].all() and masks[2].tolist() == [t == UNTHINK for t in range(VOCAB.width)]
    choices.accept(1)  # the model disagreed at the second token: the watcher forgets it
    assert call(watcher, [WORD, WAIT]) is not None  # the budget still runs out at the same position
    assert watcher.mark().reply_length == 2


def test_a_free_draft_has_no_masks() -> None:
    """Where the watcher steers nothing, the decoder gets no mask at all."""
    watcher = ReplyWatcher(VOCAB, NO_TEXT, 64, thinking_open=True)
    assert WatchedChoices(watcher, VOCAB.width).draft(PROMPT, [WORD, WAIT]) == ([WORD, WAIT], None)


def test_a_plain_step_reads_its_pending_token_only_when_the_watcher_reads() -> None:
    """The newest token of a pipelined step is waited for only when the watcher reads the history."""

    class Pending:
        """A token still being computed, counting how often it is waited for."""

        def __init__(self, token: int) -> None:
            self.token = token
            self.reads = 0

        def item(self) -> int:
            self.reads += 1
            return self.token

    watcher = ReplyWatcher(VOCAB, Limits(hedge_limit=3, repeat_limit=3), 64, thinking_open=True)
    choices = WatchedChoices(watcher, VOCAB.width)
    sequence = list(PROMPT)
    choices.step(sequence, None)
    pendings = [Pending(WORD) for _ in range(2 * CHECK_EVERY)]
    for pending in pendings:
        choices.step(sequence, pending)
        sequence.append(pending.token)
    assert sum(p.reads for p in pendings) == 2  # one at each check


def test_restoring_rolls_the_grammar_back(tiny_model: Path) -> None:
    """Tokens the matcher consumed after a mark are rolled back: the next mask is the mask before them."""
    from llguidance import LLMatcher
    from transformers import AutoTokenizer

    hf: Any = AutoTokenizer.from_pretrained(str(tiny_model))
    eos = (hf.convert_tokens_to_ids("<|im_end|>"),)
    ll = structured.ll_tokenizer(hf, 512, eos)
    grammar = structured.grammar_for({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}})
    assert grammar is not None
    matcher = LLMatcher(ll, grammar)
    vocab = Vocabulary(width=512, eos=eos, think_start=(), think_end=(), piece=lambda t: str(hf.decode([t])))
    watcher = ReplyWatcher(
        vocab, NO_TEXT, 64, thinking_open=False, grammar=Grammar(matcher, structured.TokenClasses.of(ll, 512))
    )
    written: list[int] = hf.encode('{"name":"Ada","n":12', add_special_tokens=False)

    def row(count: int) -> Any:
        history = PROMPT + written[:count]
        return watcher.allowed(len(history), reader(history), 512)

    first = row(0)
    mark = watcher.mark()
    for count in range(1, len(written) + 1):
        row(count)
    assert watcher.mark().state.consumed == len(written)
    watcher.restore(mark)
    assert watcher.mark().state.consumed == 0 and not matcher.is_error()
    assert (row(0) == first).all()
    assert matcher.validate_tokens(written) == len(written)  # the document may start again


@pytest.fixture(scope="module")
def loaded(tiny_model: Path) -> tuple[Any, Any]:
    """Load the session's tiny model once for this module."""
    model, tokenizer = load(str(tiny_model))[:2]
    return model, tokenizer


CASES = {
    "thinking_budget": (Limits(reasoning_budget=20, hedge_limit=0, repeat_limit=0), True, None),
    "thinking_limits": (Limits(), True, None),
    "thinking_off": (Limits(), False, None),
    "limit_answers": (Limits(limit_answers=True), False, None),
    "json_object": (Limits(), False, {"type": "json_object"}),
    "schema_after_thinking": (
        Limits(reasoning_budget=10),
        True,
        {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
    ),
}


@pytest.mark.parametrize("prompt_name", sorted(PROMPTS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_watched_lookup_is_watched_greedy_token_for_token(loaded: tuple[Any, Any], case: str, prompt_name: str) -> None:
    """With a watcher on a thinking vocabulary, the lookup decoder emits what mlx_lm's greedy steps emit."""
    model, tokenizer = loaded
    limits, thinking_open, response_format = CASES[case]
    eos = tuple(sorted(tokenizer.eos_token_ids))
    grammar = structured.grammar_for(response_format)
    ll = structured.ll_tokenizer(tokenizer._tokenizer, 512, eos) if grammar is not None else None

    def watcher() -> ReplyWatcher:
        vocab = Vocabulary(512, eos, (500,), (501,), lambda t: str(tokenizer.decode([t])))  # 500, 501: the markers
        matched = None
        if grammar is not None and ll is not None:
            from llguidance import LLMatcher

            matched = Grammar(LLMatcher(ll, grammar), structured.TokenClasses.of(ll, 512))
        return ReplyWatcher(vocab, limits, 120, thinking_open, matched)

    prompt = tokenizer.encode(PROMPTS[prompt_name])
    steps: Any = generate_step(mx.array(prompt), model, max_tokens=120, logits_processors=[watcher()])
    want = [int(token) for token, _ in steps]
    decoder = LookupDecoder(
        model, make_prompt_cache(model), prompt, 0, window=8192, max_draft=8, steering=WatchedChoices(watcher(), 512)
    )
    decoder.prefill(2048)
    got = list(decoder.generate(120))
    end = next((i + 1 for i, t in enumerate(want) if t in eos), len(want))  # a reply ends at EOS
    assert got[:end] == want[:end]
    if case.startswith("thinking") and thinking_open:
        assert 501 in want[:end], "the watcher closed the thinking"
    assert prompt_name == "chat" or decoder.stats.accepted > 0


def test_lookup_refuses_no_watched_request() -> None:
    """A greedy request that needs the reply watcher takes lookup; images and sampling still do not."""
    provider = SimpleNamespace(draft_model=None, cli_args=SimpleNamespace(adapter_path=None, kv_bits=None))
    generator: Any = SimpleNamespace(model_provider=provider)
    greedy = SimpleNamespace(
        sampling=SimpleNamespace(temperature=0.0),
        logits=SimpleNamespace(logit_bias=None, repetition_penalty=0.0, presence_penalty=0.0, frequency_penalty=0.0),
        seed=None,
        logprobs=False,
        top_logprobs=-1,
    )
    watched = SimpleNamespace(options=RequestOptions(grammar="x", limits=Limits(limit_answers=True)), messages=[])
    refusals = cast(Callable[[Any, Any, Any], list[str]], WrappedGenerator.lookup_refusals)
    assert refusals(generator, watched, greedy) == []
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}
    assert refusals(generator, SimpleNamespace(options=RequestOptions(), messages=[image]), greedy) == ["images"]
