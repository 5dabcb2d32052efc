"""The corpus of real chat templates (``tests/templates/``, sources in its ``SOURCES.toml``) and how to render them.

A template is rendered as the worker renders it: with transformers' own jinja setup (the sandbox, ``tojson``,
``raise_exception``, ``strftime_now``) and the checkpoint's special tokens, with the request's ``tools`` and the
generation prompt as given. Beside them, what each cannot do for agents as shipped, with the reason (the session
tests assert each exactly, and docs/families.md gives the measured table). No tests here.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TEMPLATES_DIR = Path(__file__).parent / "templates"


# -- what a template cannot do for agents as shipped (tests/unit/test_template_sessions.py asserts each exactly) --

# Templates that refuse every agent session as shipped, with the template's own words (each turn from the first
# tool call on answers 400 with them and the remedy).
REFUSED = {
    # transformers' sandboxed renderer refuses the template's ``list.append`` (the template as its checkpoint shipped)
    "Kimi-K2-Instruct": "access to attribute 'append' of 'list' object is unsafe",
    "Kimi-K2-Thinking": "access to attribute 'append' of 'list' object is unsafe",
    # no tool role: a tool result breaks the template's strict user/assistant alternation
    "google-gemma-2-2b-it": "Conversation roles must alternate user/assistant/user/assistant/...",
    "google-gemma-3-it": "Conversation roles must alternate user/assistant/user/assistant/...",
    # the template leaves tool messages out: refused by the adapter rather than served without the results
    "microsoft-Phi-3.5-mini-instruct": "The chat template renders no tool results",
}
# Turns a template rewrites by its own design, whatever the conversation's form: the reason, and the turns.
# A new question (the request at index QUESTION) after tool calls:
QUESTION_REWRITES = {
    # the empty <think></think> of assistant turns after the last user query is dropped once a new query comes
    "Qwen3.5-4B": ("codex", "opencode"),
    # [AVAILABLE_TOOLS] is written before the last user message: a new one moves it
    "mistralai-Mistral-Nemo-Instruct-2407": ("claude_code", "codex", "opencode"),
    "Mistral-Small-3.2-24B-Instruct-2506": ("claude_code", "codex", "opencode"),
    # Harmony drops the analysis (the text beside earlier calls) of turns before the last final answer
    "openai-gpt-oss-120b": ("claude_code",),
}
# A turn after a request that ended in a tool result: the template closes the last result differently from one
# that is followed by more. Hermes: the last "</tool_response>" comes without its newline, whatever follows; the
# R1 distill: the last output closes the outputs block, and a following call turn is written without reopening it.
TOOL_TAIL_REWRITES = {
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": False,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": False,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": True,  # only when the next turn calls again
}


def known_limits(name: str) -> bool:
    """Whether the template ``name`` refuses agent sessions or rewrites some turns by its own design."""
    return name in REFUSED or name in QUESTION_REWRITES or name in TOOL_TAIL_REWRITES


@dataclass(frozen=True)
class Template:
    """One real chat template of the corpus, with the special tokens its checkpoint gives it."""

    name: str  # the file's stem, e.g. "Qwen3-Coder"
    family: str
    checkpoint: str
    source: str = field(repr=False)
    bos_token: str = ""
    eos_token: str = ""

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        generation: bool = True,
        **kwargs: Any,
    ) -> str:
        """Render ``messages`` as ``apply_chat_template(tokenize=False)`` would; raises what the template raises."""
        return str(
            _compiled(self.source).render(
                messages=[dict(m) for m in messages],
                tools=[dict(t) for t in tools] if tools else None,
                add_generation_prompt=generation,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                **kwargs,
            )
        )


@functools.cache
def _compiled(source: str) -> Any:
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template(source)


@functools.lru_cache(maxsize=1)
def corpus() -> tuple[Template, ...]:
    """Return every template of the corpus, in ``SOURCES.toml``'s order."""
    listed = tomllib.loads((TEMPLATES_DIR / "SOURCES.toml").read_text(encoding="utf-8"))["template"]
    return tuple(
        Template(
            name=entry["file"].removesuffix(".jinja"),
            family=entry["family"],
            checkpoint=entry["checkpoint"],
            source=(TEMPLATES_DIR / entry["file"]).read_text(encoding="utf-8"),
            bos_token=entry.get("bos_token", ""),
            eos_token=entry.get("eos_token", ""),
        )
        for entry in listed
    )


def template(name: str) -> Template:
    """Return the corpus template whose file stem is ``name``."""
    for entry in corpus():
        if entry.name == name:
            return entry
    raise KeyError(name)
