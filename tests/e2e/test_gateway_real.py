"""The JIT gateway in front of the real wrapped mlx_lm.server on the tiny local model."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from tests.conftest import assert_valid
from tests.gateway_support import Gateway, pid_alive, real_worker_argv, running_gateway

pytestmark = pytest.mark.e2e
MAX_TOKENS = 8


@pytest.fixture
def gateway(tmp_path: Path, tiny_model: Path) -> Iterator[Gateway]:
    """Run a gateway whose worker is the real runtime entry serving the tiny model."""
    weight_bytes = sum(p.stat().st_size for p in tiny_model.glob("*.safetensors"))
    with running_gateway(
        tmp_path,
        real_worker_argv(tiny_model, MAX_TOKENS),
        model_path=tiny_model,
        max_tokens=MAX_TOKENS,
        max_tokens_ceiling=MAX_TOKENS,
        weight_bytes=weight_bytes,
    ) as running:
        yield running


def client_for(gateway: Gateway) -> openai.OpenAI:
    """Return an openai client pointed at the gateway."""
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="local", timeout=120, max_retries=0)


def real_loads(gateway: Gateway) -> int:
    """Count the runtime's own 'loading' lines in the worker log: one per real model load."""
    return gateway.worker_log.read_text().count("mlx-agent: loading")


def test_sixteen_concurrent_cold_requests_load_the_model_once(gateway: Gateway) -> None:
    """Sixteen chats sent while unloaded all answer, through one worker and one model load."""
    assert gateway.status()["model_state"] == "unloaded"
    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(lambda i: gateway.chat(f"question {i}", max_tokens=4), range(16)))
    assert [r.status for r in replies] == [200] * 16
    assert all(r.json()["choices"][0]["message"]["role"] == "assistant" for r in replies)
    status = gateway.status()
    assert_valid("front_state", gateway.state())
    assert (status["loads"], status["model_state"]) == (1, "loaded")
    assert gateway.worker_loads() == 1 and real_loads(gateway) == 1
    maps = Path(f"/proc/{gateway.proc.pid}/maps").read_text()
    assert "/mlx/" not in maps and "libmlx" not in maps  # the model lives in the worker only


def test_openai_client_chat_plain_and_streamed_with_the_ceiling(tiny_front: Gateway) -> None:
    """The official client chats through the front, plain and streamed; max_tokens is held to the ceiling."""
    gateway = tiny_front  # shared: its loads are counted from where it stands
    before = gateway.status()
    client = client_for(gateway)
    reply = client.chat.completions.create(
        model="org/tiny", max_tokens=1000, messages=[{"role": "user", "content": "Say hello"}]
    )
    assert reply.model == "org/tiny"
    assert reply.usage is not None and 0 < reply.usage.completion_tokens <= MAX_TOKENS
    text = []
    usage = None
    stream = client.chat.completions.create(
        model="org/tiny",
        max_tokens=1000,
        stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Count"}],
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    assert text and usage is not None and usage.completion_tokens <= MAX_TOKENS
    completion = client.completions.create(model="default_model", prompt="Once upon", max_tokens=500)
    assert completion.usage is not None and completion.usage.completion_tokens <= MAX_TOKENS
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="someone/else", messages=[{"role": "user", "content": "hi"}])
    assert client.models.retrieve("org/tiny").id == "org/tiny"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("someone/else")
    assert gateway.status()["loads"] == before["loads"] + (before["model_state"] != "loaded")  # one load at most


def test_unload_keeps_the_gateway_and_the_next_request_loads_again(gateway: Gateway) -> None:
    """Unload stops the real worker; /v1/models still answers; the next chat loads a new worker."""
    assert gateway.chat().status == 200
    worker_pid = gateway.status()["worker"]["pid"]
    assert gateway.control("POST", "unload").json()["unloaded"] is True
    assert not pid_alive(worker_pid)
    assert gateway.request("GET", "/v1/models").status == 200
    assert gateway.request("GET", "/health").json()["model_state"] == "unloaded"
    assert gateway.chat().status == 200
    assert (gateway.status()["loads"], real_loads(gateway)) == (2, 2)


def test_killed_worker_is_noticed_and_replaced(gateway: Gateway) -> None:
    """A real worker killed while idle shows as failed; the next request loads a new one; stop leaves nothing."""
    assert gateway.chat().status == 200
    worker_pid = gateway.status()["worker"]["pid"]
    os.kill(worker_pid, signal.SIGKILL)
    state = gateway.wait_state("failed")
    assert state["last_error"]["code"] == "worker_exited"
    assert gateway.chat().status == 200
    new_pid = gateway.status()["worker"]["pid"]
    assert new_pid != worker_pid and gateway.status()["loads"] == 2
    gateway.stop()
    deadline = time.monotonic() + 30
    while pid_alive(new_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(new_pid)


def test_real_cache_hits_are_reported_only_to_the_key_that_caused_them(keyed_tiny_front: Gateway) -> None:
    """The real worker's shared prompt cache shows as cached_tokens to the key that sent the prompt, not to another."""

    def cached(key: str) -> int:
        client = openai.OpenAI(base_url=keyed_tiny_front.base_url + "/v1", api_key=key, timeout=120, max_retries=0)
        reply = client.chat.completions.create(
            model="org/tiny",
            max_tokens=2,
            messages=[{"role": "user", "content": "a long private prompt about the quarterly plan"}],
        )
        assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
        return reply.usage.prompt_tokens_details.cached_tokens or 0

    assert cached("carol-key") == 0
    assert cached("carol-key") > 0  # her own prompt, cached by the worker
    assert cached("dave-key") == 0  # the worker has it cached too, but dave never sent it
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed_tiny_front.base_url + "/v1", api_key="mallory", max_retries=0).models.list()
