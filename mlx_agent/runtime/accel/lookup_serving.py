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

A reply served alone hands over to the batch when another request arrives (``hand_over``): after the token it
just sent, it goes back on the request queue behind the new ones as a continuation (``Handover``) whose prompt
is its prompt plus the tokens so far, with its decoder's KV cache (given to mlx_lm's fetch by
``resume_from_handover``, no prefill again), the rest of its ``max_tokens`` and its stop matcher part-way
(``ResumedStops``). mlx_lm's batch path then treats it as a new request; ``HandedOverQueue`` keeps the client's
reply one: it drops the batch's new context and prefill progress, writes each token's text with the reply's
own detokenizer, and passes a stop of the reply's context on to the batch's. A reply with a watcher stays
alone (its watcher may have judged positions past the last token sent, which the batch would judge again).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable
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
# The attribute that carries a handed-over reply's state into mlx_lm's batch path (``Handover``).
HANDOVER_ATTRIBUTE = "mlx_agent_handover"
# The attribute a generation argument gets once the generation thread sent its request to the batch.
BATCHED_ATTRIBUTE = "mlx_agent_lookup_batched"


@dataclass
class PromptLookup:
    """The server's prompt-lookup settings, and its running totals."""

    max_draft: int
    window: int
    totals: LookupStats = field(default_factory=LookupStats)
    batched: int = 0  # greedy requests that joined the batch without lookup because others were active
    handed_over: int = 0  # lookup replies that went on in the batch when another request arrived
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


@dataclass
class Handover:
    """A lookup reply going on in the batch: its tokens so far, its KV cache and its stop matcher part-way."""

    tokens: list[int]  # the prompt and the reply's tokens so far: the continuation's prompt
    cache: list[Any]  # holds exactly ``tokens[:cached]``
    cached: int  # at most len(tokens) - 1: mlx_lm's batch feeds the last token itself
    matcher: Any  # the reply's stop matcher, having read the tokens so far
    initial_state: str


class ResumedStops:
    """mlx_lm's ``StopSequences`` for a handed-over reply: its one matcher, which has read the reply so far."""

    def __init__(self, matcher: Any) -> None:
        self._matcher = matcher

    def matcher(self) -> Any:
        """Return the reply's matcher (mlx_lm asks once, when the sequence starts decoding)."""
        return self._matcher


class HandedOverQueue:
    """What mlx_lm's batch path puts for a handed-over reply, turned into more of the client's one reply."""

    def __init__(self, queue: Any, ctx: Any, detokenizer: Any) -> None:
        self._queue = queue
        self._ctx = ctx  # the context the handler holds (its stop is the client's)
        self._detokenizer = detokenizer
        self._batch_ctx: Any = None  # the context the batch path made, read by its stop checks

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Pass on the reply's tokens, ending and errors; drop the batch's new context and prefill progress."""
        if isinstance(item, server.GenerationContext):
            self._batch_ctx = item
        elif isinstance(item, server.Response):
            text = _next_text(self._detokenizer, item.token, item.finish_reason)
            self._queue.put(server.Response(text, item.token, item.logprob, item.finish_reason, item.top_tokens))
        elif not isinstance(item, tuple):  # the end (None) or an error
            self._queue.put(item, block, timeout)
        if self._ctx._should_stop and self._batch_ctx is not None:
            self._batch_ctx.stop()  # the batch path looks right after each put


def _next_text(detokenizer: Any, token: int, finish: str | None) -> str:
    """Add ``token`` as mlx_lm's batch path does (a stop token is not written) and return the new text."""
    if finish != "stop":
        detokenizer.add_token(token)
    if finish is not None:
        detokenizer.finalize()
    return str(detokenizer.last_segment)


def resume_from_handover(generator: Any) -> None:
    """Make the generator's prompt cache answer a handed-over reply's fetch with the reply's own KV cache.

    mlx_lm's batch path fetches right after ``_tokenize`` and ``_make_state_machine``, in the same thread; the
    generator's ``resuming`` holds the handover between them (``tokens`` is the very list ``_tokenize`` gave).
    """
    fetch = generator.prompt_cache.fetch_nearest_cache

    def fetch_nearest_cache(model: Any, tokens: list[int]) -> tuple[Any, list[int]]:
        handover: Handover | None = generator.resuming
        if handover is not None and tokens is handover.tokens:
            generator.resuming = None
            return handover.cache, tokens[handover.cached :]
        return fetch(model, tokens)  # type: ignore[no-any-return]

    setattr(generator.prompt_cache, "fetch_nearest_cache", fetch_nearest_cache)  # noqa: B010  # shadows the method


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
        waiting = _arrivals(generator) if watcher is None else None
        count = 0
        handing_over = False
        with wired_limit(model, [stream]), mx.stream(stream):
            decoder.prefill(provider.cli_args.prefill_step_size, lambda done, total: rqueue.put((done, total)))
            tokens = decoder.generate(args.max_tokens)
            try:
                for count, token in enumerate(tokens, start=1):
                    finish = "length" if count >= args.max_tokens else None
                    if stop_matcher.advance(token):
                        finish = "stop"
                    text = _next_text(detokenizer, token, finish)
                    no_top_tokens: Any = ()  # upstream annotates a one-tuple; it passes () when none are asked for
                    rqueue.put(server.Response(text, token, 0.0, finish, no_top_tokens))
                    if finish is not None or ctx._should_stop:
                        break
                    if waiting is not None and waiting():
                        handing_over = True
                        break
            finally:
                tokens.close()
        with settings.lock:
            settings.totals.add(decoder.stats)
            settings.handed_over += handing_over
            totals = settings.totals.describe()
        log.info("mlx-agent: %s prompt lookup: %s; server total: %s", label, decoder.stats.describe(), totals)
        if handing_over:
            in_cache = decoder.in_cache
            if in_cache >= len(decoder.sequence):  # the batch feeds the last token itself
                trim_prompt_cache(cache, in_cache - len(decoder.sequence) + 1)
                in_cache = len(decoder.sequence) - 1
            handover = Handover(decoder.sequence, cache, in_cache, stop_matcher, initial_state)
            hand_over(generator, request, ctx, detokenizer, handover, count, settings)
            return
        rqueue.put(None)
        generator.prompt_cache.insert_cache(provider.model_key, decoder.sequence[: decoder.in_cache], cache)
    except Exception as error:
        rqueue.put(error)


def _arrivals(generator: Any) -> Callable[[], bool] | None:
    """Return whether a request waits for the generation thread (None: this reply is never handed over)."""
    if generator._is_distributed or not generator.model_provider.is_batchable:
        return None  # a group's ranks take requests in step; a model mlx_lm cannot batch stays alone
    requests = generator.requests
    return lambda: requests.qsize() > 0


def hand_over(
    generator: Any,
    request: tuple[Any, Any, Any],
    ctx: Any,
    detokenizer: Any,
    handover: Handover,
    sent: int,
    settings: PromptLookup,
) -> None:
    """Queue the rest of a lookup reply, after the requests that arrived, to go on in mlx_lm's batch."""
    rqueue, request_, args = request
    rest = copy.copy(args)  # the handler keeps the request's own arguments
    rest.max_tokens = args.max_tokens - sent
    setattr(rest, BATCHED_ATTRIBUTE, True)
    setattr(rest, HANDOVER_ATTRIBUTE, handover)
    waiting = generator.requests.qsize()
    generator.requests.put((HandedOverQueue(rqueue, ctx, detokenizer), request_, rest))
    log.info(
        "mlx-agent: %s hands over to the batch after %d tokens (%d requests arrived; %d handed over so far)",
        getattr(request_, "label", "request"),
        sent,
        waiting,
        settings.handed_over,
    )
