"""Chunked prefill beside the batch, in process on the tiny model: mlx_lm's tokens, a short prompt served first."""

from __future__ import annotations

import importlib
from pathlib import Path
from queue import Queue
from typing import Any

import mlx_lm.server
import pytest
from mlx_lm import load
from mlx_lm.generate import BatchGenerator

from mlx_agent.errors import SeamChanged
from mlx_agent.runtime.entries import seams
from mlx_agent.runtime.serving.chunked_prefill import ArrivalBudget, ChunkedBatchGenerator

STEP = 32
GENERATE = importlib.import_module("mlx_lm.generate")
LONG = [5 + (i * 7) % 400 for i in range(300)]  # ten chunks of STEP
SHORT = [11, 12, 13, 14, 15]


@pytest.fixture(scope="module")
def model(tiny_model: Path) -> Any:
    """Load the session's tiny model once for this module."""
    return load(str(tiny_model))[0]


def run(
    generator_class: type[Any], model: Any, prompts: dict[str, list[list[int]]], late: dict[str, int] | None = None
) -> tuple[dict[str, list[int]], list[tuple[str, str, Any]]]:
    """Serve segmented prompts to the end of 8 tokens; ``late`` inserts a prompt after that many steps.

    Returns each prompt's tokens and the events in the order the steps reported them: ("prompt", name, progress)
    and ("token", name, token).
    """
    late = late or {}
    generator = generator_class(model, prefill_step_size=STEP)
    names: dict[int, str] = {}

    def insert(name: str) -> None:
        (uid,) = generator.insert_segments([prompts[name]], max_tokens=[8])
        names[uid] = name

    for name in prompts:
        if name not in late:
            insert(name)
    tokens: dict[str, list[int]] = {name: [] for name in prompts}
    events: list[tuple[str, str, Any]] = []
    finished: set[str] = set()
    steps = 0
    while len(finished) < len(prompts):
        steps += 1
        assert steps < 500, "the generator stopped making progress"
        for name, at in late.items():
            if at == steps:
                insert(name)
        prompt_responses, generation_responses = generator.next()
        for response in prompt_responses:
            events.append(("prompt", names[response.uid], response.progress))
        for response in generation_responses:
            name = names[response.uid]
            tokens[name].append(response.token)
            events.append(("token", name, response.token))
            if response.finish_reason is not None:
                finished.add(name)
    return tokens, events


def test_a_long_prompt_alone_gets_mlx_lms_tokens(model: Any) -> None:
    """A prompt of ten chunks, prefilled beside the batch, decodes the tokens mlx_lm's own generator gives."""
    native, _ = run(BatchGenerator, model, {"long": [LONG]})
    chunked, events = run(ChunkedBatchGenerator, model, {"long": [LONG]})
    assert chunked == native
    progress = [p for kind, _, p in events if kind == "prompt"]
    assert progress[0] == (STEP, len(LONG))
    assert (len(LONG) - 1, len(LONG)) in progress  # the last token is left for the decoding step
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)
    assert progress[-1] == (len(LONG), len(LONG))  # mlx_lm's own end-of-prompt report, counted from the start


def test_a_short_prompt_arriving_mid_prefill_decodes_first_with_unchanged_tokens(model: Any) -> None:
    """A short prompt inserted while a long one prefills starts decoding before it, and neither reply changes."""
    alone = {
        name: run(BatchGenerator, model, {name: [prompt]})[0][name]
        for name, prompt in (("long", LONG), ("short", SHORT))
    }
    tokens, events = run(ChunkedBatchGenerator, model, {"long": [LONG], "short": [SHORT]}, late={"short": 3})
    assert tokens == alone
    first_short = events.index(next(e for e in events if e[:2] == ("token", "short")))
    first_long = events.index(next(e for e in events if e[:2] == ("token", "long")))
    assert first_short < first_long
    # The long prompt was still prefilling when the short one decoded: its chunks go on after that token.
    assert any(e[:2] == ("prompt", "long") for e in events[first_short:first_long])
    # No chunk of the long prompt ran from the short prompt's arrival to its first token (mlx_lm's runs three).
    short_prompt = events.index(next(e for e in events if e[:2] == ("prompt", "short")))
    assert ("prompt", "long") not in {e[:2] for e in events[short_prompt : first_short + 1]}


def test_mlx_lms_own_generator_pads_the_short_prompt_into_the_long_ones_step(model: Any) -> None:
    """The behaviour replaced: upstream prefills the newcomer in the long prompt's padded step, chunk by chunk."""
    _, events = run(BatchGenerator, model, {"long": [LONG], "short": [SHORT]}, late={"short": 3})
    short_prompt = events.index(next(e for e in events if e[:2] == ("prompt", "short")))
    # Upstream reports the long prompt's chunk in the same step as the short prompt.
    assert ("prompt", "long") in {e[:2] for e in events[short_prompt - 1 : short_prompt + 2]}


def segment_ends(generator: Any, segments: list[list[int]]) -> tuple[list[int], list[tuple[list[Any], list[int]]]]:
    """Prefill ``segments`` to the first token; return where segment ends were reported, and the caches then."""
    (uid,) = generator.insert_segments([segments], max_tokens=[4])
    ends: list[int] = []
    extracted: list[tuple[list[Any], list[int]]] = []
    for _ in range(40):
        prompt_responses, generation_responses = generator.next()
        for response in prompt_responses:
            if response.end_of_segment and not response.end_of_prompt:
                ends.append(response.progress[0])
                cache, key = generator.extract_cache([uid])[uid]
                extracted.append((cache, list(key)))
        if generation_responses:
            break
    return ends, extracted


def test_segment_ends_are_reported_and_their_caches_are_copies(model: Any) -> None:
    """Each segment's end is reported where mlx_lm reports it, and its extracted cache no longer grows."""
    segments = [LONG[:50], LONG[50:200], LONG[200:]]
    native, _ = segment_ends(BatchGenerator(model, prefill_step_size=STEP), [list(s) for s in segments])
    ends, extracted = segment_ends(ChunkedBatchGenerator(model, prefill_step_size=STEP), segments)
    assert ends == native == [50, 200, len(LONG) - 1]  # the last token is a segment of its own
    for cache, key in extracted:
        assert cache[0].offset == len(key)  # the copy holds exactly the tokens of its key, prefill went on


def test_a_removed_long_prompt_stops_prefilling(model: Any) -> None:
    """Removing a long prompt mid-prefill drops it; the generator has nothing left to do."""
    generator: Any = ChunkedBatchGenerator(model, prefill_step_size=STEP)
    (uid,) = generator.insert([LONG], max_tokens=[4])
    generator.next()
    generator.next()
    assert generator.prompt_cache_nbytes > 0
    generator.remove([uid])
    assert generator.next() == ([], [])
    assert generator.prompt_cache_nbytes == 0


def test_the_time_slice_ends_when_a_request_waits() -> None:
    """The slice always runs one step; it ends after a step once a request waits (or its time is up)."""
    requests: Queue[Any] = Queue()
    budget = ArrivalBudget(requests, seconds=3600)
    steps = 0
    for _ in budget:
        steps += 1
        if steps == 3:
            requests.put("a request")
    assert steps == 3
    assert sum(1 for _ in budget) == 1  # still waiting: one step, then the loop takes the request
    assert sum(1 for _ in ArrivalBudget(Queue(), seconds=0)) == 1


def test_the_chunked_generator_is_the_one_the_loop_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """install() replaces the name mlx_lm's generation loop builds its batch generator by."""
    from mlx_agent.runtime.serving import chunked_prefill

    monkeypatch.setattr(mlx_lm.server, "BatchGenerator", BatchGenerator)
    chunked_prefill.install()
    assert mlx_lm.server.BatchGenerator is ChunkedBatchGenerator  # type: ignore[attr-defined]


@pytest.mark.parametrize("dotted", sorted(seams.GENERATE_SEAMS))
def test_a_renamed_batch_generator_seam_fails_loudly(monkeypatch: pytest.MonkeyPatch, dotted: str) -> None:
    """If upstream renames a member chunked prefill overrides or calls, the check names it."""
    owner, name = dotted.split(".")
    monkeypatch.delattr(getattr(GENERATE, owner), name)
    with pytest.raises(SeamChanged, match=name):
        seams.check_seams()


def test_a_loop_that_no_longer_builds_batch_generator_by_name_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the generation loop stops using the module's BatchGenerator name, the replacement would be ignored."""

    def _generate(self: Any) -> None:
        self._time_budget, self._is_batchable, self._serve_single = None, None, None

    monkeypatch.setattr(mlx_lm.server.ResponseGenerator, "_generate", _generate)
    with pytest.raises(SeamChanged, match="BatchGenerator"):
        seams.check_seams()


def test_a_lost_progress_field_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the prompt step's report loses a field chunked prefill fills, the check names it."""

    class Response:
        uid: int

    monkeypatch.setattr(GENERATE.PromptProcessingBatch, "Response", Response)
    with pytest.raises(SeamChanged, match=r"PromptProcessingBatch\.Response"):
        seams.check_seams()
