"""The reply watcher: a logits processor that enforces a request's JSON schema and reply limits.

mlx_lm calls each processor once per generated token with the token history (which ends partway into the
prompt) and the next token's logits. The first call fixes where the reply starts; later calls bring the
reply's new tokens. A reply moves through phases:

``start``     a thinking model may open its thinking, or begin the answer
``thinking``  free text until the model (or a limit) closes it; with a schema, the reply may not end here
``answer``    with a schema, every token must fit the grammar (llguidance's mask)

A Harmony model (gpt-oss) thinks on its analysis channel: ``<|channel|>analysis<|message|>`` opens the thinking,
``<|end|>`` ends it, and its answer is written after a header (``answer_header``: ``<|start|>assistant
<|channel|>final<|message|>``), which a thinking closed by a limit is given, and a schema's answer waits for.

Without a schema the watcher reads the history only every ``CHECK_EVERY`` tokens (each token of ``start``,
and at the exact token a budget runs out), so an unconstrained reply keeps mlx_lm's pipelining: reading a
token waits for the step that sampled it. Cutting short: thinking is closed by forcing its end marker (the
model then answers); a JSON answer "wraps up" (closes what it is writing so the schema completes); a plain
answer gets only EOS. An answer cut short is reported with finish_reason "length" (``cut``).

Prompt lookup (``lookup_verify``) asks for each position of a draft in turn (``allowed``) as if the draft were
accepted, and then takes the rejected positions back: ``mark`` is the watcher's whole state after a position (a
value), ``restore`` returns to it (rolling the grammar back by the tokens it consumed since), and what the
watcher would log meanwhile is held until the positions it came from are kept (``hold``, ``release``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mlx_agent.runtime.reply import structured
from mlx_agent.runtime.serving.limits import HEDGE_WINDOW, Limits, answer_reserve, count_hedges, loop_length

log = logging.getLogger(__name__)

# The attribute of mlx_lm's GenerationArguments that carries a reply's watcher to the logits processors.
WATCHER_ATTRIBUTE = "mlx_agent_watcher"

CHECK_EVERY = 8
# With a draft model, mlx_lm takes back rejected guesses: the history is compared this far back each call.
VERIFY_WINDOW = 32


@dataclass(frozen=True)
class Vocabulary:
    """What the watcher needs to know about the model's tokens."""

    width: int  # the model's output row; may exceed the tokenizer's size
    eos: tuple[int, ...]
    think_start: tuple[int, ...]  # empty for a model that does not think
    think_end: tuple[int, ...]
    piece: Callable[[int], str]  # one token's text, for judging hedges and loops
    answer_header: tuple[int, ...] = ()  # what follows think_end before an answer (Harmony's final header)


@dataclass(frozen=True)
class Grammar:
    """A compiled schema for one reply: its matcher and the token classes that wrap it up."""

    matcher: Any  # llguidance.LLMatcher
    classes: structured.TokenClasses


@dataclass
class _State:
    """Everything one more token can change; copied per token when the history may be taken back."""

    phase: str
    thinking_tokens: int = 0
    phase_from: int = 0  # where the text judged for hedges and loops starts
    forced: tuple[int, ...] = ()  # tokens to force next, one per step (closing the thinking)
    thought_cut: bool = False
    ending: bool = False  # a plain answer being ended: EOS only
    wrapping: bool = False  # a JSON answer finishing as soon as it can
    cut: str | None = None
    consumed: int = 0  # tokens fed to the matcher
    header_left: int = 0  # tokens of the answer's header still to come (not fed to the matcher)
    broken: bool = False


# Reads tokens ``lo:hi`` of the history the watcher is called with.
Reader = Callable[[int, int], list[int]]


@dataclass(frozen=True)
class Mark:
    """The watcher as it was after one call: restoring it takes back every later token and judgement."""

    state: _State
    reply_length: int
    read_at: int
    judged_at: int
    held: int  # log lines held so far


@dataclass
class ReplyWatcher:
    """One reply's logits processor (see the module docstring)."""

    vocab: Vocabulary
    limits: Limits
    max_tokens: int
    thinking_open: bool  # the prompt left a thinking block open
    grammar: Grammar | None = None
    verify_history: bool = False
    label: str = "reply"
    _state: _State = field(init=False)
    _initial: Mark = field(init=False)
    _reply: list[int] = field(init=False, default_factory=list)
    _snapshots: list[Mark] = field(init=False, default_factory=list)  # after each reply token (verify_history)
    _start: int | None = field(init=False, default=None)
    _read_at: int = field(init=False, default=0)
    _thinking_deadline: int = field(init=False, default=0)
    _finish_check_at: int = field(init=False, default=0)
    _judged_at: int = field(init=False, default=0)
    _failed: bool = field(init=False, default=False)
    _held: list[tuple[str, tuple[Any, ...]]] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.thinking_open and self.vocab.think_end:
            phase = "thinking"
        elif self.vocab.think_start:
            phase = "start"
        else:
            phase = "answer"
        self._state = _State(phase=phase)
        self._initial = Mark(replace(self._state), 0, 0, 0, 0)
        least = 0
        if self.grammar is not None:
            steps = structured.steps_to_finish(
                self.grammar.matcher, self.grammar.classes, self.vocab.eos, self.vocab.width
            )
            least = 2 * steps + 8 + len(self.vocab.think_end) + len(self.vocab.answer_header)
            self._finish_check_at = 3 * steps + 32
        self._thinking_deadline = self.max_tokens - answer_reserve(self.max_tokens, least)

    @property
    def cut(self) -> str | None:
        """Why the answer was cut short, or None; read by the handler thread once the reply has ended."""
        return self._state.cut

    @property
    def phase(self) -> str:
        """The phase the reply is in, as of the last token read."""
        return self._state.phase

    @property
    def eager(self) -> bool:
        """Whether every step must read the newest token."""
        return (self.grammar is not None and not self._state.broken) or bool(self._state.forced) or self.verify_history

    def __call__(self, tokens: Any, logits: Any) -> Any:
        """Return ``logits`` steered for the next token; never raise into mlx_lm's generation thread."""
        if self._failed:
            return logits
        try:
            allowed = self._allowed(
                int(tokens.shape[-1]), lambda lo, hi: tokens.reshape(-1)[lo:hi].tolist(), int(logits.shape[-1])
            )
            return logits if allowed is None else _apply(logits, allowed)
        except Exception:
            self._fail()
            return logits

    def allowed(self, length: int, read: Reader, width: int) -> NDArray[np.bool_] | None:
        """Return which tokens may follow a history of ``length`` tokens (None: any), as a call would steer."""
        if self._failed:
            return None
        try:
            return self._allowed(length, read, width)
        except Exception:
            self._fail()
            return None

    def _fail(self) -> None:
        # A bug here must not kill the generation thread that serves every request.
        log.exception("mlx-agent: the reply watcher of %s failed; the reply continues unwatched", self.label)
        self._failed = True

    # -- taking positions back (prompt lookup) ---------------------------------------------------------

    def mark(self) -> Mark:
        """Return the watcher's state as of now, to ``restore`` later."""
        held = len(self._held) if self._held is not None else 0
        return Mark(replace(self._state), len(self._reply), self._read_at, self._judged_at, held)

    def restore(self, mark: Mark) -> None:
        """Return to ``mark``, taken earlier in this reply: later tokens, judgements and held log lines go."""
        fed = self._state.consumed
        del self._reply[mark.reply_length :]
        del self._snapshots[mark.reply_length :]
        self._state = replace(mark.state)
        self._read_at, self._judged_at = mark.read_at, mark.judged_at
        if self._held is not None:
            del self._held[mark.held :]
        if self.grammar is not None and fed > self._state.consumed:
            self.grammar.matcher.rollback(fed - self._state.consumed)

    def hold(self) -> None:
        """Hold what the watcher logs until ``release`` (its positions may yet be taken back)."""
        if self._held is None:
            self._held = []

    def release(self) -> None:
        """Log what was held and kept, and log at once from now on."""
        held, self._held = self._held or [], None
        for message, args in held:
            log.info(message, *args)

    def _say(self, message: str, *args: Any) -> None:
        if self._held is not None:
            self._held.append((message, args))
        else:
            log.info(message, *args)

    # -- reading the history ---------------------------------------------------------------------------

    def _allowed(self, length: int, read: Reader, width: int) -> NDArray[np.bool_] | None:
        if self._start is None:
            self._start = length
        generated = length - self._start
        if self.eager or generated >= self._read_at:
            self._sync(read, generated)
            self._judge()
            self._read_at = self._next_read()
        return self._steer(width, generated)

    def _sync(self, read: Reader, generated: int) -> None:
        start = self._start or 0
        keep = min(len(self._reply), generated)
        if self.verify_history and keep:
            lo = max(0, keep - VERIFY_WINDOW)
            seen = read(start + lo, start + keep)
            parted = next((i for i, t in enumerate(seen) if t != self._reply[lo + i]), len(seen))
            if parted == 0 and lo > 0:
                seen = read(start, start + keep)
                parted = next((i for i, t in enumerate(seen) if t != self._reply[i]), len(seen))
                lo = 0
            keep = lo + parted
        if keep < len(self._reply):
            self._rollback(len(self._reply) - keep)
        if keep < generated:
            for token in read(start + keep, start + generated):
                self._step(int(token))

    def _rollback(self, count: int) -> None:
        """Take back the newest ``count`` tokens (a draft model's rejected guesses)."""
        keep = len(self._reply) - count
        self.restore(self._snapshots[keep - 1] if keep else self._initial)

    def _step(self, token: int) -> None:
        """Move the phases by one reply token."""
        state = self._state
        self._reply.append(token)
        if state.forced:
            state.forced = state.forced[1:] if token == state.forced[0] else ()
        start, end = self.vocab.think_start, self.vocab.think_end
        if state.phase == "start":
            so_far = tuple(self._reply)
            if so_far == start:
                self._enter("thinking")
            elif start[: len(so_far)] == so_far:
                if self.grammar is not None:
                    state.forced = start[len(so_far) :]  # a marker once begun is finished
            else:
                self._enter("answer", at=0)
                for earlier in so_far:
                    self._feed(earlier)
        elif state.phase == "thinking":
            state.thinking_tokens += 1
            if end and tuple(self._reply[-len(end) :]) == end:
                self._enter("answer")
                header = self.vocab.answer_header
                # A closed thinking (already forcing the header) or a schema's answer writes the answer's header.
                if header and (self.grammar is not None or state.forced == header):
                    state.forced = header
                    state.header_left = len(header)
        elif state.header_left:
            state.header_left -= 1
        else:
            self._feed(token)
            if self.grammar is None and start and tuple(self._reply[-len(start) :]) == start:
                self._enter("thinking")  # a reply of several messages may think again
        if self.verify_history:
            self._snapshots.append(self.mark())

    def _enter(self, phase: str, at: int | None = None) -> None:
        self._state.phase = phase
        self._state.phase_from = len(self._reply) if at is None else at

    def _feed(self, token: int) -> None:
        state = self._state
        if self.grammar is None or state.broken or token in self.vocab.eos:
            return  # EOS ends the reply; a draft model may guess on past it
        matcher = self.grammar.matcher
        if matcher.is_stopped():
            return  # the JSON is complete; only EOS can follow, anything else is a guess to be taken back
        if self.verify_history and not matcher.validate_tokens([token]):
            return  # a draft guess the main model will reject; feeding it would break the matcher for good
        if matcher.consume_token(token):
            state.consumed += 1
            return
        # Only possible if llguidance and mlx_lm disagree about the tokenizer; the log says so.
        state.broken = True
        log.error(
            "mlx-agent: the schema of %s rejected token %d (%s); the rest is unconstrained",
            self.label,
            token,
            matcher.get_error(),
        )

    def _next_read(self) -> int:
        generated = len(self._reply)
        state = self._state
        if state.phase == "start":
            return generated + 1  # a few tokens: whether the reply thinks, read as it happens (the budget counts)
        if state.phase == "answer" and not self.limits.limit_answers and not self.vocab.answer_header:
            return self.max_tokens + 1  # nothing left to watch without a schema
        # (A Harmony answer is read on: a reply of several messages may think again on its analysis channel.)
        read_at = generated + CHECK_EVERY - generated % CHECK_EVERY  # checks stay on every CHECK_EVERY-th token
        if state.phase == "thinking":
            if self.limits.reasoning_budget:
                read_at = min(read_at, generated + max(1, self.limits.reasoning_budget - state.thinking_tokens))
            read_at = min(read_at, max(generated + 1, self._thinking_deadline))
        return read_at

    # -- judging ------------------------------------------------------------------------------------

    def _judge(self) -> None:
        state = self._state
        if state.forced or state.ending or state.wrapping:
            return
        if state.phase == "thinking":
            budget = self.limits.reasoning_budget
            if budget and state.thinking_tokens >= budget:
                self._close_thinking(f"spent its reasoning budget of {budget} tokens")
            elif len(self._reply) >= self._thinking_deadline:
                self._close_thinking(
                    f"thought for {state.thinking_tokens} tokens, leaving only the answer's "
                    f"reserve of max_tokens={self.max_tokens}"
                )
            elif reason := self._judge_text():
                self._close_thinking(reason)
        elif state.phase == "answer" and self.limits.limit_answers and (reason := self._judge_text()):
            self._cut_answer(reason)

    def _judge_text(self) -> str | None:
        """Look for hedges and loops in the current phase's text, at most every ``CHECK_EVERY`` tokens."""
        if not self.limits.watches_text or len(self._reply) - self._judged_at < CHECK_EVERY:
            return None
        self._judged_at = len(self._reply)
        judged = self._reply[max(self._state.phase_from, len(self._reply) - HEDGE_WINDOW) :]
        if self.limits.hedge_limit:
            hedges = count_hedges("".join(self.vocab.piece(t) for t in judged))
            if hedges >= self.limits.hedge_limit:
                return f"second-guessed itself {hedges} times"
        if self.limits.repeat_limit:
            period = loop_length(judged, self.limits.repeat_limit, self.vocab.piece)
            if period:
                return f"wrote the same {period} tokens {self.limits.repeat_limit} times in a row"
        return None

    def _close_thinking(self, reason: str) -> None:
        self._say("mlx-agent: %s %s; closing its thinking so that it answers", self.label, reason)
        self._state.forced = self.vocab.think_end + self.vocab.answer_header
        self._state.thought_cut = True

    def _cut_answer(self, reason: str) -> None:
        state = self._state
        state.cut = reason
        if self.grammar is not None and not state.broken:
            self._say("mlx-agent: %s %s; closing the JSON it is writing", self.label, reason)
            state.wrapping = True
        else:
            self._say("mlx-agent: %s %s; ending the answer", self.label, reason)
            state.ending = True

    # -- steering -----------------------------------------------------------------------------------

    def _steer(self, width: int, generated: int) -> NDArray[np.bool_] | None:
        """Return the tokens allowed next, or None when the model is free."""
        state = self._state
        if state.forced:
            return _with(state.forced[:1], width)
        if state.ending:
            return _with(self.vocab.eos, width)
        grammar = None if state.broken else self.grammar
        if state.phase == "thinking":
            if grammar is not None:
                return _without(self.vocab.eos, width)  # answer first, then end
            return None
        if grammar is None:
            if state.thought_cut and len(self.vocab.think_start) == 1 and state.phase == "answer":
                return _without(self.vocab.think_start, width)
            return None
        if state.phase == "answer" and not state.wrapping and self.max_tokens - generated <= self._finish_check_at:
            steps = structured.steps_to_finish(grammar.matcher, grammar.classes, self.vocab.eos, width)
            if self.max_tokens - generated <= 2 * steps + 4:
                self._cut_answer(f"is {self.max_tokens - generated} tokens from max_tokens")
        mask = structured.allowed_mask(grammar.matcher, width)
        if state.phase == "start" and self.vocab.think_start:
            mask = mask | structured.pack(_with(self.vocab.think_start[:1], width))
        elif state.wrapping:
            mask = structured.wrap_up(mask, grammar.classes, self.vocab.eos)
        return structured.unpack(mask, width)


def _with(ids: Sequence[int], width: int) -> NDArray[np.bool_]:
    row = np.zeros(width, dtype=bool)
    row[[t for t in ids if t < width]] = True
    return row


def _without(ids: Sequence[int], width: int) -> NDArray[np.bool_]:
    return ~_with(ids, width)


def _apply(logits: Any, allowed: NDArray[np.bool_]) -> Any:
    """Set the logit of every token outside ``allowed`` to minus infinity."""
    import mlx.core as mx

    return mx.where(mx.array(allowed), logits, mx.array(-np.inf, dtype=logits.dtype))
