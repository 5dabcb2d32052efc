"""The wrapped server's prompt-lookup path: which requests take it, and how one is served.

With ``--prompt-lookup`` a greedy request (``native_reasons`` finds nothing against it) is marked in the handler
thread. When the generation thread takes it and no other request is queued or running, the generator reports
it as not batchable, so mlx_lm hands it to ``_serve_single``, where ``serve_prompt_lookup`` runs the lookup
decoder instead of ``stream_generate``; with others active it joins the batch with native decoding (the same
greedy tokens), and the log says so (``joins the batch without prompt lookup``). Everything else keeps mlx_lm's
native path, batched or not.

``serve_prompt_lookup`` keeps what mlx_lm's single path does: the prompt cache is fetched before and stored after
(with exactly the tokens the KV cache holds), stop sequences and EOS end the reply with ``stop`` (as the
batch path reports them), ``max_tokens`` with ``length``, and a stopped context ends it at once. A reply with a
watcher (thinking, limits, a schema) is steered by it as natively (``lookup_verify``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import mlx_lm.server as server
from mlx_lm.generate import wired_limit
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from mlx_agent.runtime.accel.lookup_verify import WatchedChoices
from mlx_agent.runtime.accel.prompt_lookup import LookupDecoder, LookupStats, plain_kv_cache
from mlx_agent.runtime.reply.watcher import WATCHER_ATTRIBUTE, ReplyWatcher

log = logging.getLogger(__name__)

# The attribute of mlx_lm's GenerationArguments that marks a request for the lookup path.
PROMPT_LOOKUP_ATTRIBUTE = "mlx_agent_prompt_lookup"


@dataclass
class PromptLookup:
    """The server's prompt-lookup settings, and its running totals."""

    max_draft: int
    window: int
    totals: LookupStats = field(default_factory=LookupStats)
    batched: int = 0  # greedy requests that joined the batch without lookup because others were active
    lock: threading.Lock = field(default_factory=threading.Lock)


def native_reasons(args: Any, *, has_draft_model: bool, has_adapter: bool, kv_bits: Any) -> list[str]:
    """Return why a request keeps native generation (empty for a plain greedy request)."""
    reasons = []
    sampling, logits = args.sampling, args.logits
    if sampling.temperature != 0:
        reasons.append("sampling (temperature > 0)")
    if logits.logit_bias:
        reasons.append("logit_bias")
    for name in ("repetition_penalty", "presence_penalty", "frequency_penalty"):
        value = getattr(logits, name)
        if value is not None and value != 0:
            reasons.append(name)
    if args.seed is not None:
        reasons.append("seed")
    if args.logprobs:
        reasons.append("logprobs")
    if args.top_logprobs > 0:
        reasons.append("top_logprobs")
    if has_draft_model:
        reasons.append("a draft model")
    if has_adapter:
        reasons.append("an adapter")
    if kv_bits is not None:
        reasons.append("a quantized KV cache")
    return reasons


def model_ready(model: Any) -> str | None:
    """Return why a model's cache rules out prompt lookup, or None when it is ordinary ``KVCache`` throughout."""
    cache = make_prompt_cache(model)
    if plain_kv_cache(cache):
        return None
    kinds = sorted({type(layer).__name__ for layer in cache})
    return f"the model's cache is {', '.join(kinds) or 'empty'}, not an ordinary trimmable KVCache"


def _fetch(generator: Any, model: Any, prompt: list[int]) -> tuple[list[Any], int]:
    """Return a cache holding exactly ``prompt[:n]`` (n < len(prompt)) from the prompt cache, and n."""
    cache, rest = generator.prompt_cache.fetch_nearest_cache(generator.model_provider.model_key, prompt[:])
    cached = len(prompt) - len(rest)
    if cache is not None and plain_kv_cache(cache):
        offset = cache[0].offset
        if offset > cached:
            trim_prompt_cache(cache, offset - cached)  # an entry may hold one token more than its key
        elif offset < cached:
            cache = None
        if cache is not None and cached == len(prompt):
            trim_prompt_cache(cache, 1)  # the last prompt token is fed with the first draft
            cached -= 1
    else:
        cache = None
    if cache is None:
        return make_prompt_cache(model), 0
    return cache, cached


def serve_prompt_lookup(generator: Any, request: tuple[Any, Any, Any], stream: Any, settings: PromptLookup) -> None:
    """Serve one request with prompt lookup, as mlx_lm's ``_serve_single`` serves one natively."""
    rqueue, request_, args = request
    label = getattr(request_, "label", "request")
    try:
        provider = generator.model_provider
        model, tokenizer = provider.model, provider.tokenizer
        prompt, _, _, initial_state, _ = generator._tokenize(tokenizer, request_, args)
        stop_sequences, text_sm = generator._make_state_machine(provider.model_key, tokenizer, args.stop_words)
        ctx = server.GenerationContext(
            has_thinking=tokenizer.has_thinking,
            has_tool_calling=tokenizer.has_tool_calling,
            tool_parser=tokenizer.tool_parser,
            text_sm=text_sm,
            initial_state=initial_state,
            prompt=prompt,
        )
        rqueue.put(ctx)
        generator._log_cache_stats()
        cache, cached = _fetch(generator, model, prompt)
        ctx.prompt_cache_count = cached
        watcher: ReplyWatcher | None = getattr(args, WATCHER_ATTRIBUTE, None)
        steering = WatchedChoices(watcher, watcher.vocab.width) if watcher is not None else None
        decoder = LookupDecoder(
            model, cache, prompt, cached, window=settings.window, max_draft=settings.max_draft, steering=steering
        )
        stop_matcher = stop_sequences.matcher()
        detokenizer = tokenizer.detokenizer
        with wired_limit(model, [stream]), mx.stream(stream):
            decoder.prefill(provider.cli_args.prefill_step_size, lambda done, total: rqueue.put((done, total)))
            tokens = decoder.generate(args.max_tokens)
            try:
                for count, token in enumerate(tokens, start=1):
                    finish = "length" if count >= args.max_tokens else None
                    if stop_matcher.advance(token):
                        finish = "stop"
                    if finish != "stop":
                        detokenizer.add_token(token)
                    if finish is not None:
                        detokenizer.finalize()
                    no_top_tokens: Any = ()  # upstream annotates a one-tuple; it passes () when none are asked for
                    rqueue.put(server.Response(detokenizer.last_segment, token, 0.0, finish, no_top_tokens))
                    if finish is not None or ctx._should_stop:
                        break
            finally:
                tokens.close()
        rqueue.put(None)
        generator.prompt_cache.insert_cache(provider.model_key, decoder.sequence[: decoder.in_cache], cache)
        with settings.lock:
            settings.totals.add(decoder.stats)
            totals = settings.totals.describe()
        log.info("mlx-agent: %s prompt lookup: %s; server total: %s", label, decoder.stats.describe(), totals)
    except Exception as error:
        rqueue.put(error)
