"""End to end: agent sessions on real chat templates, served by the real wrapped worker behind the front.

The tiny model carries a real template of the corpus (its weights are random: what it answers does not matter).
Each turn of the Claude Code and Codex sessions (``tests/agent_sessions.py``: ``toolu_`` ids, parallel calls,
reminders after tool results, developer messages, two user messages in a row) goes through the front's chat
completions to the worker, where the conversation is adapted to the template (ids, one call per turn,
alternation) and mlx_lm renders it. Each must answer 200, and each turn must read the previous turn's prompt from
the worker's cache (what ``usage`` reports), except where the template rewrites by design (listed with the corpus).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.agent_sessions import QUESTION, SHAPES
from tests.gateway_support import real_worker_argv, running_gateway
from tests.template_corpus import QUESTION_REWRITES, template

pytestmark = pytest.mark.e2e

# Llama 3.3 takes one call per turn; Mistral Small 3.2 takes 9-character ids and alternating roles only.
SERVED = ["meta-llama-Llama-3.3-70B-Instruct", "Mistral-Small-3.2-24B-Instruct-2506"]


def model_with_template(tiny_model: Path, directory: Path, name: str) -> Path:
    """Return a copy of the tiny model whose chat template is the corpus template ``name``."""
    model = directory / "model"
    shutil.copytree(tiny_model, model)
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template(name).source
    config_path.write_text(json.dumps(config))
    return model


@pytest.mark.parametrize("name", SERVED)
def test_agent_sessions_are_served_on_a_real_template(name: str, tiny_model: Path, tmp_path: Path) -> None:
    """Every turn answers 200, and each turn after the first reads at least 95% of the previous prompt from cache."""
    model = model_with_template(tiny_model, tmp_path, name)
    with running_gateway(tmp_path, real_worker_argv(model, 2), model_path=model, max_tokens=2) as front:
        for shape in ("claude_code", "codex"):
            previous = 0
            for number, body in enumerate(SHAPES[shape]()):
                sent = {**body, "model": "org/tiny", "max_tokens": 2, "stream": False}
                reply = front.request("POST", "/v1/chat/completions", sent)
                assert reply.status == 200, (shape, number, reply.body[:500])
                usage = json.loads(reply.body)["usage"]
                rewritten = number == QUESTION and shape in QUESTION_REWRITES.get(name, ())
                if number and not rewritten:
                    assert usage["prompt_tokens_details"]["cached_tokens"] >= 0.95 * previous, (shape, number, usage)
                previous = usage["prompt_tokens"]
