"""Long prompts prefilled a chunk at a time beside the running batch, so a short request is not kept waiting.

mlx_lm's ``BatchGenerator`` prefills every prompt of its prompt batch together, one ``prefill_step_size`` chunk
of each per step, right-padded to the longest: a short prompt that arrives while a long one prefills is padded to
the long one's chunk, and its first token waits for the long one's next chunk too. ``ChunkedBatchGenerator``
takes a prompt longer than one chunk out of that batch and prefills it itself, one chunk per step on its own
cache, and only in a step that had no other prompt work and gave no reply its first token: short prompts go
through mlx_lm's prompt batch first, alone, and their first token is handed out without waiting for a long chunk;
the long prompt's chunks go on between the batch's decode steps. When only
its last token is left it goes back to mlx_lm's queue, which turns it into a decoding sequence at the next step.
The chunks are the ones mlx_lm would have run (a segment's tokens, at most ``prefill_step_size`` at a time), so
the reply is the one mlx_lm gives.

``ArrivalBudget`` replaces the generation loop's time slice (``TimeBudget``, half a second of steps): it ends
the slice after a step when a request waits, so a request is taken into the batch after the current step
rather than after the slice.

Seams: ``mlx_lm.server.BatchGenerator`` (the name the generation loop builds) and the ``BatchGenerator``
members named in ``entries/seams.py``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from queue import Queue
from typing import Any

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, PromptProcessingBatch

BUDGET_SECONDS = 0.5  # mlx_lm's TimeBudget default: the longest slice of steps between looks at the queue


@dataclass
class Prefilling:
    """A long prompt being prefilled beside the batch: mlx_lm's queued sequence, and how far it has come."""

    uid: int
    segments: list[list[int]]  # what is left to prefill; the last segment is the prompt's last token
    max_tokens: int
    cache: list[Any]
    tokens: list[int]  # the tokens in ``cache``
    sampler: Any
    processors: Any
    stop: Any
    done: int  # prompt tokens prefilled here
    total: int  # prompt tokens to prefill when it was taken

    @classmethod
    def of(cls, sequence: tuple[Any, ...]) -> Prefilling:
        """Take mlx_lm's queued tuple (uid, segments, max tokens, cache, tokens, sampler, processors, stop)."""
        uid, segments, max_tokens, cache, tokens, sampler, processors, stop = sequence
        total = sum(len(s) for s in segments)
        return cls(uid, segments, max_tokens, cache, list(tokens), sampler, processors, stop, 0, total)

    def queued(self) -> tuple[Any, ...]:
        """Return the sequence as mlx_lm queues it, with what is left of its prompt."""
        return (
            self.uid,
            self.segments,
            self.max_tokens,
            self.cache,
            self.tokens,
            self.sampler,
            self.processors,
            self.stop,
        )


def remaining(sequence: tuple[Any, ...]) -> int:
    """Return the prompt tokens a queued mlx_lm sequence still has to prefill."""
    return sum(len(s) for s in sequence[1])


class ChunkedBatchGenerator(BatchGenerator):
    """mlx_lm's batch generator, with prompts longer than one chunk prefilled beside the batch (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prefilling: list[Prefilling] = []
        self._handed_back: dict[int, int] = {}  # uid: tokens prefilled here, added to mlx_lm's progress reports
        self._decoding: set[int] = set()  # uids that have had their first token

    def _take_long_prompts(self) -> None:
        queued = self._unprocessed_sequences
        if not any(remaining(s) > self.prefill_step_size for s in queued):
            return
        keep = [s for s in queued if remaining(s) <= self.prefill_step_size]
        self._prefilling += [Prefilling.of(s) for s in queued if remaining(s) > self.prefill_step_size]
        queued.clear()
        queued.extend(keep)

    def _next(self) -> tuple[list[Any], list[Any]]:
        self._take_long_prompts()
        prompt_responses, generation_responses = super()._next()  # type: ignore[no-untyped-call]
        for response in prompt_responses:
            offset = self._handed_back.get(response.uid)
            if offset is not None:
                response.progress = (offset + response.progress[0], offset + response.progress[1])
                if response.end_of_prompt:
                    del self._handed_back[response.uid]
        first_token = False
        for generated in generation_responses:
            if generated.uid not in self._decoding:
                first_token = True
                self._decoding.add(generated.uid)
            if generated.finish_reason is not None:
                self._decoding.discard(generated.uid)
        # A step that prefilled a short prompt, or gave a reply its first token, leaves the long one for the
        # next: the generation loop hands out a step's tokens only when the whole step is done.
        busy = prompt_responses or first_token or len(self._generation_batch) >= self.completion_batch_size
        if self._prefilling and not busy:
            prompt_responses.append(self._prefill_chunk())
        return prompt_responses, generation_responses

    def _prefill_chunk(self) -> Any:
        """Prefill one chunk of the oldest long prompt; hand it back to mlx_lm when only its last token is left."""
        sequence = self._prefilling[0]
        segment = sequence.segments[0]
        chunk = segment[: self.prefill_step_size]
        started = time.perf_counter()
        self.model(mx.array([chunk]), cache=sequence.cache)
        mx.eval([c.state for c in sequence.cache])
        mx.clear_cache()
        self._counters.prompt_time += time.perf_counter() - started
        self._counters.prompt_tokens += len(chunk)
        sequence.tokens += chunk
        sequence.done += len(chunk)
        del segment[: len(chunk)]
        end_of_segment = not segment
        if end_of_segment:
            sequence.segments.pop(0)
        response = PromptProcessingBatch.Response(sequence.uid, (sequence.done, sequence.total), end_of_segment, False)
        if len(sequence.segments) == 1 and len(sequence.segments[0]) == 1:
            self._prefilling.pop(0)
            self._handed_back[sequence.uid] = sequence.done
            self._unprocessed_sequences.appendleft(sequence.queued())
        return response

    def _prefilling_index(self, uid: int) -> int | None:
        return next((i for i, s in enumerate(self._prefilling) if s.uid == uid), None)

    def extract_cache(self, uids: Any) -> dict[int, Any]:
        """Return mlx_lm's extracted caches, with a copy of a long prompt's cache (it goes on growing here)."""
        ours = {uid for uid in uids if self._prefilling_index(uid) is not None}
        results: dict[int, Any] = super().extract_cache([uid for uid in uids if uid not in ours])  # type: ignore[no-untyped-call]
        for uid in ours:
            index = self._prefilling_index(uid)
            assert index is not None
            sequence = self._prefilling[index]
            results[uid] = (copy.deepcopy(sequence.cache), list(sequence.tokens))
        return results

    def remove(self, uids: Any, return_prompt_caches: bool = False) -> dict[int, Any]:
        """Remove sequences, long prompts being prefilled here among them."""
        caches = self.extract_cache(uids) if return_prompt_caches else {}
        gone = set(uids)
        self._prefilling = [s for s in self._prefilling if s.uid not in gone]
        for uid in gone:
            self._handed_back.pop(uid, None)
            self._decoding.discard(uid)
        super().remove(uids)  # type: ignore[no-untyped-call]
        return caches

    @property
    def prompt_cache_nbytes(self) -> int:
        """Return mlx_lm's count, with the caches of the long prompts being prefilled here."""
        ours = sum(c.nbytes for s in self._prefilling for c in s.cache)
        return int(super().prompt_cache_nbytes + ours)


class ArrivalBudget:
    """The generation loop's slice of steps: at least one step, then until a request waits or the time is up."""

    def __init__(self, requests: Queue[Any], seconds: float = BUDGET_SECONDS) -> None:
        self._requests = requests
        self._seconds = seconds
        self._started = 0.0
        self._steps = 0

    def __iter__(self) -> ArrivalBudget:
        self._started = time.monotonic()
        self._steps = 0
        return self

    def __next__(self) -> None:
        if self._steps > 0 and (self._requests.qsize() > 0 or time.monotonic() - self._started > self._seconds):
            raise StopIteration
        self._steps += 1
        return None


def install() -> None:
    """Make mlx_lm's generation loop build the chunked batch generator."""
    import mlx_lm.server as server

    server.BatchGenerator = ChunkedBatchGenerator  # type: ignore[attr-defined]  # the name the loop builds
