"""Measure, per real chat template, how far agent sessions' prompts only grow through the worker's own path.

For every template of the corpus (``tests/templates/``) and each session shape of ``tests/agent_sessions.py``
(Claude Code, Codex, opencode; ten turns each), every turn is prepared as the worker prepares it
(``prepare_body``: the conversation adapted to the template) and rendered with the request's tools and the
generation prompt. One row per template, the three shapes summed:

* ``grew``: turns (from the second) whose prompt starts with the previous turn's cut (the longest common prefix
  of its rendering with and without the generation prompt: what the reply's turn replaces), of all such turns;
* ``refused``: turns answered 400 (the template's own refusal, with the remedy);
* ``cached``: characters of the previous turn's cut that the next prompt starts with, summed, over the cuts'
  lengths summed (a refused turn reuses nothing);
* ``adaptations``: the adapter's steps and late-system-message ways the sessions used.

``--before REV`` measures the placement of revision REV instead (its ``runtime/serving/system_turns.py``, read
with ``git show``, probes rendered without tools, as that worker did), for a before/after pair.
Then, for the templates that take images (``VISION``), the sessions with images (``IMAGE_SHAPES``) through the
mlx-vlm worker's path (``vlm_served_prompts``), measured before (late system messages placed by probes without
tools, nothing else adapted, a refusal answered 500) and after (the adapter) in the same run (``image_rows``).
Then one row per family and template: its tool calls as the real models write them (``tests/tool_call_cases.py``),
read through the worker's path, and how many came back exactly.

Usage (from the repository root): ``python scripts/bench_families.py [--before REV] [--markdown]``
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import logging
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mlx_agent.runtime.serving.conversation import Conversations, plain_content  # noqa: E402  (after the checkout is on sys.path)
from mlx_agent.runtime.serving.system_turns import common_prefix  # noqa: E402
from tests.agent_sessions import (  # noqa: E402
    IMAGE_SHAPES,
    SHAPES,
    VISION,
    ServedPrompt,
    served_prompts,
    template_render,
    vlm_served_prompts,
)
from tests.template_corpus import Template, corpus  # noqa: E402
from tests.template_corpus import template as corpus_template  # noqa: E402
from tests.tool_call_cases import family_rows  # noqa: E402


@dataclass
class Row:
    """One template's figures over every session shape."""

    name: str
    family: str
    grew: int = 0
    turns: int = 0
    refused: int = 0
    reused: int = 0
    cut: int = 0
    adaptations: list[str] = field(default_factory=list)

    def add(self, prompts: list[ServedPrompt]) -> None:
        """Count one session's turns."""
        self.refused += sum(1 for p in prompts if p.error is not None)
        for previous, turn in itertools.pairwise(prompts):
            self.turns += 1
            if previous.error is not None:
                continue
            self.cut += len(previous.cut)
            if turn.error is None:
                self.reused += common_prefix(turn.prompt, previous.cut)
                self.grew += turn.prompt.startswith(previous.cut)

    @property
    def cached(self) -> float:
        """The share of the previous turns' cuts the next prompts start with."""
        return self.reused / self.cut if self.cut else 0.0


def template_rows(before: str | None = None) -> list[Row]:
    """Return one row per corpus template: the three session shapes through the worker's path."""
    rows = []
    for template in corpus():
        row = Row(template.name, template.family)
        conversations = Conversations(template_render(template))
        for build in SHAPES.values():
            bodies = build()
            if before is None:
                row.add(served_prompts(template, bodies, conversations))
                for used in conversations.adapter(bodies[-1].get("tools")).adaptations(bodies[-1]["messages"]):
                    if used not in row.adaptations:
                        row.adaptations.append(used)
            else:
                row.add(_served_before(template, bodies, before))
        rows.append(row)
    return rows


def image_rows() -> list[tuple[Row, Row]]:
    """Return, per template that takes images, its image sessions through the mlx-vlm worker: before, after."""
    rows = []
    for name, (model_type, _) in VISION.items():
        pair = (Row(name, corpus_template(name).family), Row(name, corpus_template(name).family))
        for build in IMAGE_SHAPES.values():
            bodies = build()
            for row, before in zip(pair, (True, False), strict=True):
                row.add(vlm_served_prompts(corpus_template(name), model_type, bodies, before=before))
        rows.append(pair)
    return rows


def print_image_rows(rows: list[tuple[Row, Row]], markdown: bool) -> None:
    """Print the image-session table: grew, refused (500 before, 400 after) and cached, before and after."""

    def figures(row: Row) -> tuple[str, str, str]:
        return f"{row.grew}/{row.turns}", str(row.refused), f"{100 * row.cached:.1f}%"

    lines = [(before.name, before.family, *figures(before), *figures(after)) for before, after in rows]
    head = ("template", "family", "grew before", "refused before", "cached before", "grew", "refused", "cached")
    print_table(head, lines, markdown)


def _served_before(template: Template, bodies: list[dict[str, Any]], revision: str) -> list[ServedPrompt]:
    """Render each body as revision ``revision``'s worker did: its placement (probes without tools), then render."""
    module = _module_at(revision, "mlx_agent/runtime/serving/system_turns.py")

    def without_tools(messages: list[dict[str, Any]], generation: bool) -> str:
        return template.render(messages, generation=generation)

    turns = module.SystemTurns(without_tools)
    out = []
    for body in bodies:
        try:
            # then what mlx_lm does before it renders: text parts joined, arguments parsed
            messages = plain_content(turns.place([dict(m) for m in body["messages"]]))
            prompt = template.render(messages, tools=body.get("tools"), generation=True)
            bare = template.render(messages, tools=body.get("tools"), generation=False)
        except Exception as error:
            out.append(ServedPrompt(error=error))  # type: ignore[arg-type]  # counted, not read
            continue
        out.append(ServedPrompt(prompt, prompt[: common_prefix(prompt, bare)]))
    return out


def _module_at(revision: str, path: str) -> Any:
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{revision}:{path}"], check=True, capture_output=True, text=True
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(source)
    spec = importlib.util.spec_from_file_location("system_turns_before", file.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    Path(file.name).unlink()
    return module


def print_table(head: tuple[str, ...], lines: Sequence[tuple[str, ...]], markdown: bool) -> None:
    """Print rows under their head: aligned columns, or a markdown table for docs/families.md."""
    if markdown:
        for line in [head, tuple("---" for _ in head), *lines]:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    for line in [head, *lines]:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def print_template_rows(rows: list[Row], markdown: bool) -> None:
    """Print the template table, with a last row summing every template."""
    lines = [
        (
            r.name,
            r.family,
            f"{r.grew}/{r.turns}",
            str(r.refused),
            f"{100 * r.cached:.1f}%",
            ", ".join(r.adaptations) or "-",
        )
        for r in rows
    ]
    grew, turns = sum(r.grew for r in rows), sum(r.turns for r in rows)
    full = sum(1 for r in rows if r.grew == r.turns)
    reused, cut = sum(r.reused for r in rows), sum(r.cut for r in rows)
    refused = str(sum(r.refused for r in rows))
    total = ("all", f"{full}/{len(rows)} at 100%", f"{grew}/{turns}", refused, f"{100 * reused / cut:.1f}%", "")
    print_table(("template", "family", "grew", "refused", "cached", "adaptations"), [*lines, total], markdown)


def print_family_rows(rows: list[dict[str, Any]], markdown: bool) -> None:
    """Print the tool-call table (``tool_call_cases.family_rows``): calls parsed exactly per family and template."""
    lines = [
        (
            row["family"],
            row["template"],
            row["parser"] or "-",
            f"{row['exact']}/{row['total']}",
            ", ".join(row["failed"]) or "-",
        )
        for row in rows
    ]
    exact, total = sum(row["exact"] for row in rows), sum(row["total"] for row in rows)
    lines.append(("all", f"{len(rows)} templates", "", f"{exact}/{total}", ""))
    print_table(("family", "template", "parser", "exact", "failed"), lines, markdown)


def main() -> int:
    """Print the template table, then the tool-call table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="measure revision REV's system-message placement instead")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    args = parser.parse_args()
    print_template_rows(template_rows(args.before), args.markdown)
    print()
    print_image_rows(image_rows(), args.markdown)
    print()
    # The cut-short cases are kept as text on purpose; the worker's log line for each is not the table's.
    logging.getLogger("mlx_agent.runtime.reply.tool_calls").setLevel(logging.ERROR)
    print_family_rows(family_rows(), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
