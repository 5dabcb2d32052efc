"""mlx_vlm's start-up settings left in the user's shell never reach a worker: only the reviewed argv sets them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_agent.runtime.entries.vlm_environment import cli_settings
from tests.e2e.closing_http import closing_post
from tests.e2e.worker_socket_support import socket_worker

pytestmark = pytest.mark.e2e

# What a user's shell might hold for mlx_vlm's own server: each would change the worker if it were read.
HOSTILE = {
    "MLX_VLM_SERVER_API_KEY": "a-key-the-front-never-sends",  # every request would be 401
    "MLX_VLM_PRELOAD_TTS_MODEL": "/nonexistent/voice",  # a second model preloaded
    "MLX_VLM_DRAFT_MODEL": "/nonexistent/drafter",  # a drafter no plan bound
    "MAX_KV_SIZE": "4",  # every reply cut at 4 tokens of cache
    "MLX_TRUST_REMOTE_CODE": "true",
}


def test_the_names_are_read_from_mlx_vlms_own_cli() -> None:
    """The variables cleared are the ones mlx_vlm's CLI writes for its flags, the hostile ones among them."""
    names = cli_settings()
    assert set(HOSTILE) <= names and "MLX_VLM_MODEL_PATHS" in names
    assert not any(name.startswith("APC_") for name in names)  # the prefix cache's are the plan's own


def test_a_worker_ignores_mlx_vlm_settings_from_the_environment(
    tiny_vlm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the hostile variables set the worker answers without a key, loads nothing else, says it ignored them."""
    for name, value in HOSTILE.items():
        monkeypatch.setenv(name, value)  # socket_worker starts the worker with this process's environment
    with socket_worker(tiny_vlm, runtime="mlx-vlm") as worker:
        body = {
            "model": str(tiny_vlm),
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8,
            "temperature": 0,
        }
        answer = worker.exchange(closing_post(body, "/v1/chat/completions"))  # not held to keep-alive's end
        assert answer.status == 200, answer.body[:300]
        assert answer.json()["usage"]["completion_tokens"] == 8  # no 4-token cache cut the reply short
        log = worker.log()
    assert "ignored mlx_vlm settings from the environment" in log
    assert all(name in log for name in HOSTILE), log[-2000:]
    assert "nonexistent" not in log  # nothing tried to load the paths they name
