"""The corpus of real chat templates (``tests/templates/``, sources in its ``SOURCES.toml``) and how to render them.

A template is rendered as the worker renders it: with transformers' own jinja setup (the sandbox, ``tojson``,
``raise_exception``, ``strftime_now``) and the checkpoint's special tokens, with the request's ``tools`` and the
generation prompt as given. No tests here.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TEMPLATES_DIR = Path(__file__).parent / "templates"


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
