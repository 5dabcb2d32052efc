"""Harmony in the wrapped server: which tokenizers speak it, and the text machine mlx_lm's handler runs.

mlx_lm 0.32.2 does not know Harmony: a gpt-oss reply came back as one text, its thinking, channel markup and
calls inside. The generator gives a Harmony model's reply a ``HarmonyTextMachine`` (from
``_make_state_machine``) and the Harmony call parser (on the generation context); mlx_lm's handler runs the
machine through the class-level ``TextStateMachine.split/flush/discard``, which ``install`` replaces with
``HarmonyAwareTextStateMachine``: Harmony states go to ``harmony``, every other state to mlx_lm's own code.
So streaming and non-streaming replies, reasoning, tool calls and ``finish_reason`` take mlx_lm's own path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx_lm.server as server
from mlx_lm.generate import TextStateMachine

from mlx_agent.runtime.reply import harmony


@dataclass(frozen=True)
class HarmonyVocabulary:
    """The token ids of a Harmony tokenizer that the generator and the reply watcher use."""

    start: int  # <|start|>, where the prompt's last message begins
    think_start: tuple[int, ...]  # <|channel|>analysis<|message|>
    think_end: tuple[int, ...]  # <|end|>
    answer_header: tuple[int, ...]  # <|start|>assistant<|channel|>final<|message|>


def harmony_vocabulary(tokenizer: Any) -> HarmonyVocabulary | None:
    """Return the Harmony ids of ``tokenizer`` (mlx_lm's wrapper), or None when it lacks a Harmony token."""
    vocab = tokenizer.get_vocab()
    if not all(token in vocab for token in harmony.REQUIRED_TOKENS):
        return None

    def encode(text: str) -> tuple[int, ...]:
        return tuple(tokenizer.encode(text, add_special_tokens=False))

    return HarmonyVocabulary(
        start=vocab[harmony.START],
        think_start=encode(harmony.THINKING_HEADER),
        think_end=encode(harmony.END),
        answer_header=encode(harmony.ANSWER_HEADER),
    )


class HarmonyTextMachine:
    """The ``text_sm`` of a Harmony reply: ``make_state`` gives the reply's first ``harmony.HarmonyState``."""

    def __init__(self, stop_words: list[str] | tuple[str, ...]) -> None:
        self.stop_words = tuple(stop_words)

    def make_state(self, initial: str = harmony.HEADER) -> harmony.HarmonyState:
        """Return the state a reply starts in (``initial`` as ``generator._tokenize`` chose it)."""
        return harmony.start(initial, self.stop_words)


class HarmonyAwareTextStateMachine(TextStateMachine):
    """mlx_lm's ``TextStateMachine``, whose static steps also take Harmony states."""

    @staticmethod
    def split(state: Any, text: str) -> tuple[Any, list[tuple[str | None, str]]]:
        """Split ``text`` as Harmony for a Harmony state, else as mlx_lm does."""
        if isinstance(state, harmony.HarmonyState):
            new_state, segments = harmony.split(state, text)
            return new_state, list(segments)
        result: tuple[Any, list[tuple[str | None, str]]] = TextStateMachine.split(state, text)  # type: ignore[no-untyped-call]
        return result

    @staticmethod
    def flush(state: Any) -> tuple[Any, str, str | None]:
        """End a reply cut by max_tokens (Harmony or mlx_lm's)."""
        if isinstance(state, harmony.HarmonyState):
            return harmony.flush(state)
        result: tuple[Any, str, str | None] = TextStateMachine.flush(state)  # type: ignore[no-untyped-call]
        return result

    @staticmethod
    def discard(state: Any) -> tuple[Any, str | None]:
        """End a reply that stopped (Harmony or mlx_lm's)."""
        if isinstance(state, harmony.HarmonyState):
            return harmony.discard(state)
        result: tuple[Any, str | None] = TextStateMachine.discard(state)  # type: ignore[no-untyped-call]
        return result


def install() -> None:
    """Make mlx_lm's handler split Harmony states (``server.TextStateMachine`` is the class it calls)."""
    server.TextStateMachine = HarmonyAwareTextStateMachine  # type: ignore[attr-defined]  # replacing the class is the seam


def prompt_mode(tokenizer: Any, prompt: list[int], vocabulary: HarmonyVocabulary) -> str:
    """Return the mode a reply to ``prompt`` starts in: the text from the prompt's last ``<|start|>`` decides."""
    try:
        at = len(prompt) - 1 - prompt[::-1].index(vocabulary.start)
    except ValueError:
        return harmony.HEADER
    return harmony.open_message(tokenizer.decode(prompt[at:]))
