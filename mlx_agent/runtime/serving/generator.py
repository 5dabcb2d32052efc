"""Our subclass of mlx_lm's ``ResponseGenerator``, and the request record it receives.

``_tokenize`` runs in the generation thread with the request, the tokenizer and the prompt's thinking state
together: it renders the template the request asked for (``add_generation_prompt``, ``continue_final_message``)
and hangs the reply's watcher on the generation arguments, where the replaced ``_make_logits_processors``
appends it. ``generate`` runs in the handler thread and returns a ``ReplyStream`` that watches the client; with
``--prompt-lookup`` it also marks a greedy request for the lookup path (``lookup_serving``), which the generation
thread then serves alone through ``_serve_single``, steered by the same watcher (``lookup_verify``), when no
other request is active; with others active it joins mlx_lm's batch without lookup (``_is_batchable``), so
concurrent requests keep batching, and a reply served alone hands over to the batch when another request
arrives: ``_tokenize`` and ``_make_state_machine`` give mlx_lm's batch path its continuation. Long prompts
prefill a chunk at a time beside the batch (``chunked_prefill``).

A Harmony model (gpt-oss) gets its own text machine from ``_make_state_machine``, a first state read from the
prompt's last message (``_tokenize``), and the Harmony call parser on its generation context (``generate``);
its analysis channel is the watcher's thinking (``harmony_serving``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import mlx_lm.server as server

from mlx_agent.errors import ContextLengthExceeded, EmptyPrompt, SchemaFailed
from mlx_agent.runtime.accel.lookup_serving import (
    BATCHED_ATTRIBUTE,
    HANDOVER_ATTRIBUTE,
    PROMPT_LOOKUP_ATTRIBUTE,
    Handover,
    PromptLookup,
    ResumedStops,
    native_reasons,
    resume_from_handover,
    serve_prompt_lookup,
)
from mlx_agent.runtime.reply import structured
from mlx_agent.runtime.reply.harmony import CALL
from mlx_agent.runtime.reply.harmony_calls import parse_call
from mlx_agent.runtime.reply.harmony_serving import (
    HarmonyTextMachine,
    HarmonyVocabulary,
    harmony_vocabulary,
    prompt_mode,
)
from mlx_agent.runtime.reply.watcher import WATCHER_ATTRIBUTE, Grammar, ReplyWatcher, Vocabulary
from mlx_agent.runtime.serving import conversation, progress
from mlx_agent.runtime.serving.cancel import POLL_SECONDS, ReplyStream
from mlx_agent.runtime.serving.chunked_prefill import ArrivalBudget
from mlx_agent.runtime.serving.errors_http import bad_request, from_generation_error, generation_unavailable
from mlx_agent.runtime.serving.limits import Limits
from mlx_agent.runtime.serving.request_options import RequestOptions, Served
from mlx_agent.wire import EXIT_GENERATION_DIED

log = logging.getLogger(__name__)

WATCHDOG_SECONDS = 0.5  # how often the worker looks at its generation thread
DEATH_GRACE_SECONDS = 1.0  # what requests in flight get to answer 503 before a dead worker exits


@dataclass
class WrappedRequest(server.CompletionRequest):
    """mlx_lm's ``CompletionRequest`` with what the wrapper needs on both threads."""

    options: RequestOptions = field(default_factory=RequestOptions)
    label: str = "request"
    connection: Any = None  # the client's socket, watched while the reply is generated
    watcher: ReplyWatcher | None = None  # set in the generation thread before the reply starts
    stream: ReplyStream | None = None
    cut_max_tokens: int | None = None  # the reply limit after the context's room cut it (None: not cut)

    @classmethod
    def wrap(cls, base: Any, options: RequestOptions, label: str, connection: Any) -> WrappedRequest:
        """Return ``base`` (an mlx_lm ``CompletionRequest``) with the wrapper's fields."""
        return cls(
            base.request_type,
            base.prompt,
            base.messages,
            base.tools,
            base.role_mapping,
            options=options,
            label=label,
            connection=connection,
        )


class TemplateCall:
    """A tokenizer whose chat template is called with the request's own ``add_generation_prompt``.

    mlx_lm calls ``apply_chat_template(..., add_generation_prompt=True)`` for the prompt (and with False to find
    where the system prompt ends); only the first call is changed.
    """

    def __init__(self, tokenizer: Any, options: RequestOptions) -> None:
        self._tokenizer = tokenizer
        self._options = options

    def apply_chat_template(self, *args: Any, add_generation_prompt: bool = False, **kwargs: Any) -> Any:
        """Render with the request's choices in place of mlx_lm's ``add_generation_prompt=True``."""
        if add_generation_prompt:
            add_generation_prompt = self._options.add_generation_prompt
            if self._options.continue_final_message:
                kwargs["continue_final_message"] = True
        return self._tokenizer.apply_chat_template(*args, add_generation_prompt=add_generation_prompt, **kwargs)

    def __len__(self) -> int:
        return len(self._tokenizer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


class CallingTokenizer:
    """A Harmony tokenizer that says it calls tools: mlx_lm knows no Harmony markers, and would warn otherwise."""

    has_tool_calling = True

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __len__(self) -> int:
        return len(self._tokenizer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


class WrappedGenerator(server.ResponseGenerator):
    """mlx_lm's generator with schema enforcement, reply limits and client watching (module docstring)."""

    def __init__(
        self,
        model_provider: Any,
        prompt_cache: Any,
        limit_defaults: Limits,
        prompt_lookup: PromptLookup | None = None,
        context_window: int | None = None,
    ) -> None:
        # Set before mlx_lm starts the generation thread, which may call _tokenize at once.
        conversations = conversation.for_provider(model_provider)  # adapted to what the template accepts
        self.served = Served(served_names(model_provider.cli_args.model), limit_defaults, conversations)
        self.prompt_lookup = prompt_lookup
        self.context_window = context_window
        self._ll_tokenizers: dict[Any, Any] = {}
        self._classes: dict[Any, structured.TokenClasses] = {}
        self._pieces: dict[Any, dict[int, str]] = {}
        self._harmony: dict[Any, HarmonyVocabulary | None] = {}
        self._active: list[ActiveReply] = []  # replies queued and not yet ended (lookup serves one alone)
        self._active_lock = threading.Lock()
        self.resuming: Handover | None = None  # a handed-over reply between its _tokenize and its cache fetch
        super().__init__(model_provider, prompt_cache)
        if prompt_lookup is not None:
            resume_from_handover(self)
        if not self._is_distributed:  # a group's ranks must agree on their slices: they keep mlx_lm's
            self._time_budget = ArrivalBudget(self.requests)  # type: ignore[assignment]  # the same protocol
        threading.Thread(target=self._exit_when_generation_dies, name="mlx-agent-watchdog", daemon=True).start()

    def _exit_when_generation_dies(self) -> None:
        """Exit the worker once mlx_lm's generation thread has died, so the front starts a new one.

        A dead generation thread answers every later request with 503; the process staying up would keep
        that state forever. Requests in flight get their 503 in the grace period before the exit.
        """
        while self.generation_available():  # type: ignore[no-untyped-call]
            time.sleep(WATCHDOG_SECONDS)
        log.error("mlx-agent: the generation thread died; exiting so the front starts a new worker")
        time.sleep(DEATH_GRACE_SECONDS)
        os._exit(EXIT_GENERATION_DIED)

    def harmony(self, tokenizer: Any) -> HarmonyVocabulary | None:
        """Return the served tokenizer's Harmony ids, or None when it does not speak Harmony (cached per model)."""
        key = self.model_provider.model_key
        if key not in self._harmony:
            self._harmony[key] = harmony_vocabulary(tokenizer)
        return self._harmony[key]

    def thinks(self, tokenizer: Any) -> bool:
        """Whether the model thinks: mlx_lm knows its thinking markers, or it writes Harmony's analysis channel."""
        return bool(getattr(tokenizer, "has_thinking", False)) or self.harmony(tokenizer) is not None

    def call_markers(self, tokenizer: Any) -> tuple[str | None, str | None]:
        """Return what a tool call is written between (a Harmony call's text holds its own header)."""
        if self.harmony(tokenizer) is not None:
            return None, CALL
        return tokenizer.tool_call_start, tokenizer.tool_call_end

    # -- generation thread -----------------------------------------------------------------------------

    def _tokenize(self, tokenizer: Any, request: Any, args: Any) -> Any:
        self.resuming = getattr(args, HANDOVER_ATTRIBUTE, None)
        if self.resuming is not None:  # a lookup reply going on in the batch: its prompt is what it has so far
            return self.resuming.tokens, [list(self.resuming.tokens)], ["assistant"], self.resuming.initial_state, None
        options: RequestOptions = getattr(request, "options", RequestOptions())
        label: str = getattr(request, "label", "request")
        rendering = TemplateCall(tokenizer, options) if options.custom_template_call else tokenizer
        vocabulary = self.harmony(tokenizer)
        if vocabulary is not None:
            rendering = CallingTokenizer(rendering)
        try:
            result = super()._tokenize(rendering, request, args)  # type: ignore[no-untyped-call]
        except Exception as error:  # the template's refusal: a 400 with its message and the remedy
            raise conversation.template_failed(error) from error
        if not result[0]:  # mlx_lm's batch raises on an empty sequence, and that ends the generation thread
            raise EmptyPrompt("messages" if request.request_type == "chat" else "prompt")
        asked = args.max_tokens
        self._fit_context(result[0], args)
        if isinstance(request, WrappedRequest) and args.max_tokens < asked:
            request.cut_max_tokens = args.max_tokens  # read by the handler once the context is queued
        if vocabulary is not None and request.request_type == "chat":
            result = (*result[:3], prompt_mode(tokenizer, result[0], vocabulary), *result[4:])
        initial_state = result[3]
        watcher = self._watcher(tokenizer, options, args.max_tokens, initial_state == "reasoning", label)
        setattr(args, WATCHER_ATTRIBUTE, watcher)
        if isinstance(request, WrappedRequest):
            request.watcher = watcher
        return result

    def _make_state_machine(self, model_key: Any, tokenizer: Any, stop_words: list[str]) -> tuple[Any, Any]:
        """Return mlx_lm's stop sequences and text machine; a Harmony model's text machine splits its channels."""
        stop_sequences, text_sm = super()._make_state_machine(model_key, tokenizer, stop_words)  # type: ignore[no-untyped-call]
        if self.resuming is not None:  # a handed-over reply keeps matching where it was
            stop_sequences = ResumedStops(self.resuming.matcher)
        if self.harmony(tokenizer) is not None:
            text_sm = HarmonyTextMachine(stop_words)
        return stop_sequences, text_sm

    def _fit_context(self, prompt: list[int], args: Any) -> None:
        """Refuse a prompt the model's context cannot hold, and cut the reply limit to what the context leaves."""
        window = self.context_window
        if window is None:
            return
        room = window - len(prompt)
        if room < 1:
            raise ContextLengthExceeded(
                f"The prompt is {len(prompt)} tokens, and this model's context holds "
                f"{window}; shorten the conversation."
            )
        args.max_tokens = min(args.max_tokens, room)

    def _watcher(
        self, tokenizer: Any, options: RequestOptions, max_tokens: int, thinking_open: bool, label: str
    ) -> ReplyWatcher | None:
        limits = options.limits
        thinks = self.thinks(tokenizer)
        if not needs_watcher(options, thinks):
            return None  # nothing to watch: the reply keeps mlx_lm's fastest path
        key = self.model_provider.model_key
        width = self._output_width(tokenizer)
        pieces = self._pieces.setdefault(key, {})
        harmony = self.harmony(tokenizer)
        if harmony is not None:
            think_start, think_end, answer_header = harmony.think_start, harmony.think_end, harmony.answer_header
        elif thinks:
            think_start, think_end = tuple(tokenizer.think_start_tokens or ()), tuple(tokenizer.think_end_tokens or ())
            answer_header = ()
        else:
            think_start = think_end = answer_header = ()
        vocab = Vocabulary(
            width=width,
            eos=tuple(sorted(tokenizer.eos_token_ids)),
            think_start=think_start,
            think_end=think_end,
            piece=_piece_reader(tokenizer, pieces),
            answer_header=answer_header,
        )
        grammar = None
        if options.grammar is not None:
            from llguidance import LLMatcher

            ll_tokenizer = self._ll_tokenizers.get((key, width))
            if ll_tokenizer is None:
                ll_tokenizer = structured.ll_tokenizer(tokenizer._tokenizer, width, vocab.eos)
                self._ll_tokenizers[(key, width)] = ll_tokenizer
                self._classes[(key, width)] = structured.TokenClasses.of(ll_tokenizer, width)
            matcher = LLMatcher(ll_tokenizer, options.grammar)
            if matcher.is_error():
                raise SchemaFailed(f"The JSON schema cannot be enforced: {matcher.get_error()}")
            grammar = Grammar(matcher, self._classes[(key, width)])
            log.info("mlx-agent: %s is held to its JSON schema", label)
        return ReplyWatcher(
            vocab,
            limits,
            max_tokens,
            thinking_open,
            grammar,
            verify_history=self.model_provider.draft_model is not None,
            label=label,
        )

    def output_width(self) -> int:
        """Return how many token ids the served model's logits have."""
        return self._output_width(self.model_provider.tokenizer)

    def _output_width(self, tokenizer: Any) -> int:
        args = getattr(self.model_provider.model, "args", None)
        width = getattr(args, "vocab_size", None)
        return int(width) if isinstance(width, int) and width > 0 else len(tokenizer)

    def _is_batchable(self, args: Any) -> bool:
        """Return mlx_lm's answer; a request marked for prompt lookup is batchable only while others are active.

        Alone, it is served with drafts (``_serve_single``); with other requests queued or running, it joins
        the batch with native decoding, which gives the same greedy tokens.
        """
        batchable = bool(super()._is_batchable(args))  # type: ignore[no-untyped-call]
        if not getattr(args, PROMPT_LOOKUP_ATTRIBUTE, False) or not batchable:
            return batchable
        if getattr(args, BATCHED_ATTRIBUTE, False):
            return True  # asked again when the request starts the batch generator: the choice stands
        label, others = self._others_active(args)
        if not others:
            return False
        setattr(args, BATCHED_ATTRIBUTE, True)
        assert self.prompt_lookup is not None  # only a lookup server marks requests
        with self.prompt_lookup.lock:
            self.prompt_lookup.batched += 1
            batched = self.prompt_lookup.batched
        log.info(
            "mlx-agent: %s joins the batch without prompt lookup (%d other requests active; %d batched so far)",
            label,
            others,
            batched,
        )
        return True

    def _others_active(self, args: Any) -> tuple[str, int]:
        """Return the label of the request with ``args`` and how many other replies are queued or running."""
        with self._active_lock:
            self._active = [reply for reply in self._active if not reply.ended()]
            label = next((reply.label for reply in self._active if reply.args is args), "request")
            return label, sum(1 for reply in self._active if reply.args is not args)

    def _serve_single(self, request: tuple[Any, Any, Any], stream: Any) -> None:
        """Serve a request marked for prompt lookup with the lookup decoder; any other as mlx_lm does."""
        if self.prompt_lookup is not None and getattr(request[2], PROMPT_LOOKUP_ATTRIBUTE, False):
            serve_prompt_lookup(self, request, stream, self.prompt_lookup)
        else:
            super()._serve_single(request, stream)  # type: ignore[no-untyped-call]

    # -- handler thread ----------------------------------------------------------------------------------

    def lookup_refusals(self, request: Any, generation_args: Any) -> list[str]:
        """Return why a request keeps native generation under ``--prompt-lookup`` (empty: it takes lookup)."""
        provider = self.model_provider
        reasons = native_reasons(
            generation_args,
            has_draft_model=provider.draft_model is not None,
            has_adapter=provider.cli_args.adapter_path is not None,
            kv_bits=provider.cli_args.kv_bits,
        )
        # A reply watcher (thinking, limits, a schema) steers lookup as it steers native generation.
        if any(server._image_parts(request.messages or [])):
            reasons.append("images")
        return reasons

    def generate(
        self, request: Any, generation_args: Any, progress_callback: Callable[[int, int], None] | None = None
    ) -> tuple[Any, Any]:
        """Queue the request and return its context and a ``ReplyStream`` of its tokens."""
        if not self.generation_available():  # type: ignore[no-untyped-call]
            raise generation_unavailable()
        self._preflight(generation_args)
        # Every request runs on the served model, adapter and draft, whatever name it used (checked already):
        # mlx_lm would otherwise reload the model without the adapter for a request naming its path.
        generation_args.model = replace(
            generation_args.model, model="default_model", draft="default_model", adapter=None
        )
        if self.prompt_lookup is not None:
            refusals = self.lookup_refusals(request, generation_args)
            setattr(generation_args, PROMPT_LOOKUP_ATTRIBUTE, not refusals)
            if refusals:
                log.info(
                    "mlx-agent: %s keeps native generation (%s)",
                    getattr(request, "label", "request"),
                    ", ".join(refusals),
                )
        queue = ReplyQueue()
        active = ActiveReply(queue, generation_args, getattr(request, "label", "request"))
        if self.prompt_lookup is not None:  # only lookup's choice reads the active replies
            with self._active_lock:
                self._active = [reply for reply in self._active if not reply.ended()]
                self._active.append(active)
        self.requests.put((queue, request, generation_args))
        ctx = active.ctx = self._first(queue)
        if isinstance(ctx.text_sm, HarmonyTextMachine):
            # mlx_lm's handler formats the calls the machine files with the context's parser.
            ctx.tool_parser = parse_call
            ctx.has_tool_calling = True
        watched = request if isinstance(request, WrappedRequest) else None
        stream = ReplyStream(
            ctx,
            queue,
            connection=watched.connection if watched else None,
            alive=self.generation_available,
            label=watched.label if watched else "request",
            progress=progress.reporting(id(queue), progress_callback),  # the front reads the board (progress.py)
            cut=lambda: watched.watcher.cut if watched and watched.watcher else None,
        )
        if watched is not None:
            watched.stream = stream
        return ctx, progress.ending(id(queue), iter(stream))

    def _preflight(self, generation_args: Any) -> None:
        """Build the request's sampler and logits processors in the handler thread first.

        One that cannot be built is this request's 400, never an exception in the generation thread (which
        would end it for every request).
        """
        try:
            server._make_sampler(generation_args, self.model_provider.tokenizer)  # type: ignore[no-untyped-call]
            server.make_logits_processors(  # type: ignore[attr-defined]  # unwrapped: no second watcher
                generation_args.logits.logit_bias,
                generation_args.logits.repetition_penalty,
                generation_args.logits.repetition_context_size,
                generation_args.logits.presence_penalty,
                generation_args.logits.presence_context_size,
                generation_args.logits.frequency_penalty,
                generation_args.logits.frequency_context_size,
            )
        except Exception as error:  # anything mlx raises on a bad value
            raise bad_request(
                f"The sampling parameters cannot be used: {type(error).__name__}: {error}", param="body"
            ) from None

    def _first(self, queue: Queue[Any]) -> Any:
        while True:
            try:
                item = queue.get(timeout=POLL_SECONDS)
            except Empty:
                if not self.generation_available():  # type: ignore[no-untyped-call]
                    raise generation_unavailable() from None
                continue
            if isinstance(item, Exception):
                raise from_generation_error(item)
            return item


class ReplyQueue(Queue[Any]):
    """A reply's queue that knows when the generation thread has ended the reply (its ``None`` or an error)."""

    ended = False

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        """Queue ``item``; the end of the reply marks the queue ended."""
        if item is None or isinstance(item, Exception):
            self.ended = True
        super().put(item, block, timeout)


@dataclass
class ActiveReply:
    """A reply queued or running: its queue, its generation arguments and its label (for the lookup choice)."""

    queue: ReplyQueue
    args: Any
    label: str
    ctx: Any = None  # mlx_lm's GenerationContext, once the generation thread has built it

    def ended(self) -> bool:
        """Whether the reply has ended: its last item was queued, or it was stopped (the client left)."""
        return self.queue.ended or bool(self.ctx is not None and self.ctx._should_stop)


def needs_watcher(options: RequestOptions, thinks: bool) -> bool:
    """Whether a reply needs the watcher: a schema, a thinking model, or limits on answers."""
    limits = options.limits
    return bool(options.grammar or thinks or (limits.limit_answers and limits.watches_text))


def served_names(model: str | None) -> frozenset[str]:
    """Return the names a request may give for the served model: ``default_model``, as given, and resolved."""
    names = {"default_model"}
    if model:
        names.add(model)
        path = Path(model)
        if path.exists():
            names.add(str(path.resolve()))
    return frozenset(names)


def _piece_reader(tokenizer: Any, cache: dict[int, str]) -> Callable[[int], str]:
    def piece(token: int) -> str:
        text = cache.get(token)
        if text is None:
            text = cache[token] = tokenizer.decode([token])
        return text

    return piece


def with_watcher(original: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    """Wrap mlx_lm's ``_make_logits_processors`` so a reply's watcher runs after its other processors."""

    def make_logits_processors(args: Any) -> list[Any]:
        processors = list(original(args))
        watcher = getattr(args, WATCHER_ATTRIBUTE, None)
        return [*processors, watcher] if watcher is not None else processors

    return make_logits_processors
