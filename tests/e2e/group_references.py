"""What the group tests compare a group's replies with: the wrapped entry serving the same model in one process.

A group of ranks (tensor parallel or pipeline) must give one process's greedy replies. Both the launcher's tests
(``test_distributed_entry.py``, rank 0 asked directly) and ``serve start --hosts``'s (``test_serve_group.py``,
through the front) ask the same ``PROMPTS`` for ``REPLY_TOKENS`` tokens, so one process per model answers them
once for both files (the session fixtures ``tiny_replies`` and ``qwen2_replies`` of ``tests/e2e/conftest.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.wrapped_support import running

PROMPTS = ("Tell me about the weather.", "Write a function that adds two numbers.")
REPLY_TOKENS = 24


def greedy_body(prompt: str) -> dict[str, Any]:
    """Return the chat body that asks ``prompt`` for a greedy reply of ``REPLY_TOKENS`` tokens."""
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": REPLY_TOKENS, "temperature": 0}


def one_process_replies(model: Path, log_dir: Path) -> list[str]:
    """Return the greedy replies to ``PROMPTS`` of the wrapped entry serving ``model`` alone, in one process."""
    texts = []
    with running(model, log_dir) as server:
        for prompt in PROMPTS:
            status, answer = server.post(greedy_body(prompt))
            assert status == 200, answer
            texts.append(str(answer["choices"][0]["message"]["content"] or ""))
    return texts
