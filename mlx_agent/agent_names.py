"""Rules the CLI's agent settings and the front's model listings share (stdlib only, so both processes read them).

An alias may be a glob (``claude-*``) that names many models: no client can send it as a model id, so listings
and agent configs leave it out. Codex compacts its conversation at a token count it is told: one rule gives it
that count in the settings `run`/`wire` write (plan/agent_settings.py) and in the catalogue the front answers
(gateway/openai/codex_models.py).
"""

from __future__ import annotations

CODEX_COMPACT_FRACTION = 0.9  # compact at 90% of the window, leaving room for the summary and the next turn


def is_pattern(name: str) -> bool:
    """Say whether an alias is a glob, which no client can send as a model id."""
    return any(c in name for c in "*?[")


def compact_limit(window: int | None, output: int | None) -> int | None:
    """Return where Codex should compact: 90% of ``window``, lower when the reply ceiling ``output`` needs more room."""
    if window is None:
        return None
    limit = int(window * CODEX_COMPACT_FRACTION)
    if output is not None:
        limit = min(limit, window - output)
    return max(limit, 1)
