"""Prompt-lookup decoding: the n-gram index, the decoder against plain greedy decoding, and who takes the path."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step
from mlx_lm.models import cache as cache_module
from mlx_lm.models.cache import make_prompt_cache

from mlx_agent.runtime.accel.lookup_serving import _fetch, native_reasons
from mlx_agent.runtime.accel.prompt_lookup import LookupDecoder, NgramIndex, plain_kv_cache
from mlx_agent.runtime.serving.generator import needs_watcher
from mlx_agent.runtime.serving.limits import Limits
from mlx_agent.runtime.serving.request_options import RequestOptions

CODE = (
    "def fibonacci(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
    "    return a\n\nclass Stack:\n    def push(self, item: int) -> None:\n        self.items.append(item)\n"
)
PROMPTS = {
    "code_edit": f"Rewrite this code:\n{CODE}\nHere it is:\n{CODE[:60]}",
    "chat": "Could you explain why the sky looks blue during the day but red at sunset?",
    "short": "Hi",
}


@pytest.fixture(scope="module")
def loaded(tiny_model: Path) -> tuple[Any, Any]:
    """Load the session's tiny model once for this module."""
    model, tokenizer = load(str(tiny_model))[:2]
    return model, tokenizer


def greedy(model: Any, prompt: list[int], count: int, cache: Any = None) -> list[int]:
    """Return mlx_lm's own greedy tokens (generate_step without a sampler is argmax)."""
    steps: Any = generate_step(mx.array(prompt), model, max_tokens=count, prompt_cache=cache)
    return [int(token) for token, _ in steps]


def test_index_drafts_what_followed_the_longest_recent_ngram() -> None:
    """The draft continues the latest earlier occurrence of the longest n-gram the sequence ends with."""
    index = NgramIndex([1, 2, 3, 9, 9, 2, 3, 7, 8, 5, 1, 2, 3], window=100)
    assert index.draft(3) == [9, 9, 2]  # the 3-gram 1 2 3 occurred first; the 2-gram 2 3 later
    index.append(4)
    assert index.draft(8) == []  # 3 4 never occurred


def test_index_prefers_the_latest_occurrence_and_limits_the_draft() -> None:
    """Of two occurrences of the same n-gram the latest wins; the draft stops at the limit."""
    index = NgramIndex([7, 8, 1, 1, 7, 8, 2, 2, 2, 7, 8], window=100)
    assert index.draft(2) == [2, 2]
    assert index.draft(0) == []


def test_index_sees_only_the_window_of_the_prompt_and_then_the_reply() -> None:
    """Prompt tokens before the last ``window`` are not indexed; reply tokens are."""
    index = NgramIndex([4, 5, 6, 0, 0, 0, 4, 5], window=3)
    assert index.draft(4) == []  # 4 5 6 fell outside the window
    for token in (6, 1, 4, 5):
        index.append(token)
    assert index.draft(2) == [6, 1]


def test_index_needs_two_matching_tokens() -> None:
    """A single shared token proposes nothing (MIN_NGRAM is 2)."""
    assert NgramIndex([3, 4, 5, 3], window=100).draft(4) == []


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_decoder_output_is_plain_greedy_output(loaded: tuple[Any, Any], name: str) -> None:
    """Token for token, the lookup decoder emits what mlx_lm's greedy generate_step emits."""
    model, tokenizer = loaded
    prompt = tokenizer.encode(PROMPTS[name])
    want = greedy(model, prompt, 80)
    decoder = LookupDecoder(model, make_prompt_cache(model), prompt, 0, window=8192, max_draft=8)
    decoder.prefill(16)
    assert list(decoder.generate(80)) == want
    assert decoder.stats.tokens == 80 and decoder.stats.accepted <= decoder.stats.drafted


def test_decoder_accepts_drafts_on_repetitive_text(loaded: tuple[Any, Any]) -> None:
    """A random-weight model falls into loops; the decoder then verifies several tokens per pass."""
    model, tokenizer = loaded
    prompt = tokenizer.encode(PROMPTS["code_edit"])
    decoder = LookupDecoder(model, make_prompt_cache(model), prompt, 0, window=8192, max_draft=8)
    decoder.prefill(2048)
    tokens = list(decoder.generate(120))
    assert tokens == greedy(model, prompt, 120)
    assert decoder.stats.accepted > 0 and decoder.stats.passes < 120


@pytest.mark.parametrize("stop_after", [1, 5, 17, 40])
def test_closing_early_leaves_the_cache_holding_exactly_the_sequence(loaded: tuple[Any, Any], stop_after: int) -> None:
    """After a stop the cache holds ``sequence[:in_cache]``: continuing from it gives the greedy continuation."""
    model, tokenizer = loaded
    prompt = tokenizer.encode(PROMPTS["code_edit"])
    cache = make_prompt_cache(model)
    decoder = LookupDecoder(model, cache, prompt, 0, window=8192, max_draft=8)
    decoder.prefill(2048)
    tokens = decoder.generate(100)
    got = [next(tokens) for _ in range(stop_after)]
    tokens.close()
    assert cache[0].offset == decoder.in_cache <= len(decoder.sequence) == len(prompt) + stop_after
    sequence = decoder.sequence
    resumed = LookupDecoder(model, cache, sequence, decoder.in_cache, window=8192, max_draft=8)
    resumed.prefill(2048)
    more = list(resumed.generate(20))
    assert got + more == greedy(model, prompt, stop_after + 20)


def test_plain_kv_cache_only() -> None:
    """Only a list of ordinary KVCache layers takes the lookup path."""
    caches: Any = cache_module
    assert plain_kv_cache([caches.KVCache(), caches.KVCache()])
    assert not plain_kv_cache([caches.KVCache(), caches.RotatingKVCache(max_size=8)])
    assert not plain_kv_cache([])


def test_fetch_trims_an_exact_hit_so_one_prompt_token_is_left(loaded: tuple[Any, Any]) -> None:
    """A prompt cache entry equal to the whole prompt is trimmed by one; a stale, longer entry is cut to its key."""
    model, tokenizer = loaded
    prompt = tokenizer.encode(PROMPTS["chat"])
    cache = make_prompt_cache(model)
    model(mx.array([*prompt, 5])[None], cache=cache)  # one token more than its key, as a single-path entry may be
    stored: dict[str, Any] = {}

    class PromptCache:
        def fetch_nearest_cache(self, key: Any, tokens: list[int]) -> tuple[Any, list[int]]:
            stored["key"] = key
            return cache, []

    generator = SimpleNamespace(prompt_cache=PromptCache(), model_provider=SimpleNamespace(model_key="k"))
    fetched, cached = _fetch(generator, model, prompt)
    assert fetched is cache and cached == len(prompt) - 1 == cache[0].offset and stored["key"] == "k"


def args(**changes: Any) -> Any:
    """Return mlx_lm-like generation arguments of a plain greedy request, with ``changes``."""
    sampling = SimpleNamespace(temperature=changes.pop("temperature", 0.0))
    logits = SimpleNamespace(
        logit_bias=changes.pop("logit_bias", None),
        repetition_penalty=changes.pop("repetition_penalty", 0.0),
        presence_penalty=changes.pop("presence_penalty", 0.0),
        frequency_penalty=changes.pop("frequency_penalty", 0.0),
    )
    return SimpleNamespace(
        sampling=sampling,
        logits=logits,
        seed=changes.pop("seed", None),
        logprobs=changes.pop("logprobs", False),
        top_logprobs=changes.pop("top_logprobs", -1),
    )


def test_a_plain_greedy_request_takes_lookup() -> None:
    """Temperature 0 with no penalties, bias, seed or logprobs has no reason to stay native."""
    assert native_reasons(args(), has_draft_model=False, has_adapter=False, kv_bits=None) == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"temperature": 0.7}, "sampling (temperature > 0)"),
        ({"logit_bias": {5: 1.0}}, "logit_bias"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": -0.5}, "frequency_penalty"),
        ({"seed": 3}, "seed"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
    ],
)
def test_each_request_feature_keeps_native_generation(change: dict[str, Any], reason: str) -> None:
    """Sampling, bias, each penalty, a seed, logprobs and top_logprobs each keep the request native, by name."""
    assert native_reasons(args(**change), has_draft_model=False, has_adapter=False, kv_bits=None) == [reason]


def test_every_request_reason_is_given_at_once() -> None:
    """A request with several native features gets each reason, in order, not only the first."""
    request = args(temperature=0.5, seed=1, logprobs=True, top_logprobs=3)
    reasons = native_reasons(request, has_draft_model=False, has_adapter=False, kv_bits=None)
    assert reasons == ["sampling (temperature > 0)", "seed", "logprobs", "top_logprobs"]


def test_server_features_keep_native_generation() -> None:
    """A draft model, an adapter or a quantized KV cache keep every request native."""
    assert native_reasons(args(), has_draft_model=True, has_adapter=True, kv_bits=4) == [
        "a draft model",
        "an adapter",
        "a quantized KV cache",
    ]


def test_which_replies_need_the_watcher() -> None:
    """A schema, a thinking model or answer limits need the watcher (which then steers lookup too)."""
    assert not needs_watcher(RequestOptions(), False)
    assert needs_watcher(RequestOptions(grammar="x"), False)
    assert needs_watcher(RequestOptions(), True)
    assert needs_watcher(RequestOptions(limits=Limits(limit_answers=True)), False)
