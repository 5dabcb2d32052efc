"""A bounded queue, health that tells the truth and memory checked per request, on the real front and worker.

The worker is the real wrapped mlx_lm.server on the tiny model. A test holds it busy, or wedges it, by stopping
it with SIGSTOP (what a hung GPU or a deadlock looks like from outside); nothing in the product is slowed. The two
tests that hold the one slot of a ``--max-queue 1`` front share it (each continues the worker, waits for the queue
to empty, and counts refusals from where it stands); a test that wedges, cold-loads or needs an unloaded model
starts its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mlx_agent.supervise.readiness import front_health
from tests.conftest import assert_valid, free_port
from tests.gateway_support import CONTROL_TOKEN, Gateway, gateway_config, real_worker_argv, start_gateway

pytestmark = pytest.mark.e2e
MAX_TOKENS = 8
KV_BYTES_PER_TOKEN = 2 * 2 * (16 + 16) * 4  # the tiny llama: 2 layers, 2 KV heads of 16, float32 keys and values


def front(tmp_path: Path, tiny_model: Path, **front: Any) -> Gateway:
    """Start a JIT front over the real worker; ``worker_slots`` goes to the model, the rest to the front."""
    config = gateway_config(
        tmp_path, free_port(), real_worker_argv(tiny_model, MAX_TOKENS), model_path=tiny_model, max_tokens=MAX_TOKENS
    )
    config["models"][0]["worker_slots"] = front.pop("worker_slots", 32)
    config.update(front)
    return start_gateway(tmp_path, config)


@pytest.fixture
def stopper() -> Iterator[Callable[[int], None]]:
    """Return what SIGSTOPs a worker's process group; every group stopped is continued again at the end."""
    stopped: list[int] = []

    def stop(pid: int) -> None:
        os.killpg(pid, signal.SIGSTOP)
        stopped.append(pid)

    yield stop
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)


def until(check: Callable[[], Any], timeout: float = 60) -> Any:
    """Poll ``check`` until it returns something truthy (a wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Gateway]:
    """Start one front whose model has one worker slot and --max-queue 1, shared by the tests that hold its slot."""
    gateway = front(tmp_path_factory.mktemp("one-slot"), tiny_model, worker_slots=1, max_queue=1)
    try:
        yield gateway
    finally:
        gateway.stop()


def idle(gateway: Gateway) -> dict[str, Any]:
    """Wait until the shared front runs and queues nothing (what the test before it held has ended); return it."""
    assert until(lambda: (q := queue(gateway))["running"] == 0 and q["waiting"] == 0), queue(gateway)
    return queue(gateway)


def loaded_worker(gateway: Gateway) -> int:
    """Load the model with one chat and return its worker's pid."""
    assert gateway.chat("warm up").status == 200
    pid: int = gateway.status()["worker"]["pid"]
    return pid


def queue(gateway: Gateway) -> dict[str, Any]:
    """Return the model's queue as status reports it."""
    q: dict[str, Any] = gateway.status()["queue"]
    return q


def metric(gateway: Gateway, name: str, **labels: str) -> float | None:
    """Return one sample of /metrics (None when absent)."""
    text = gateway.request("GET", "/metrics").body.decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def test_a_full_queue_refuses_with_503_queue_full_in_each_apis_shape(
    one_slot: Gateway, stopper: Callable[[int], None]
) -> None:
    """With --max-queue 1 and the one slot held, the second waiting request is refused 503 with Retry-After."""
    gateway = one_slot
    full_before = idle(gateway)["queue_full"]
    refusals_before = metric(gateway, "mlx_agent_request_refusals_total", model="org/tiny", reason="queue_full") or 0
    stopper(loaded_worker(gateway))
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(gateway.chat, "held")
        assert until(lambda: queue(gateway)["running"] == 1)
        waiting = pool.submit(gateway.chat, "waits")
        assert until(lambda: queue(gateway)["waiting"] == 1)
        refused = gateway.chat("one too many")
        anthropic = gateway.request(
            "POST",
            "/v1/messages",
            {"model": "org/tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
            headers={"anthropic-version": "2023-06-01"},
        )
        state = gateway.state()
        os.killpg(state["models"][0]["worker"]["pid"], signal.SIGCONT)
        assert (running.result(timeout=120).status, waiting.result(timeout=120).status) == (200, 200)
    assert refused.status == 503 and refused.headers["retry-after"] == "5"
    error = refused.json()["error"]
    assert (error["code"], error["type"], error["waiting"], error["max_queue"]) == (
        "queue_full",
        "server_error",
        1,
        1,
    )
    assert "--max-queue 1" in error["message"]
    assert anthropic.status == 503 and anthropic.headers["retry-after"] == "5"
    body = anthropic.json()
    assert body["type"] == "error" and (body["error"]["type"], body["error"]["code"]) == ("api_error", "queue_full")
    assert_valid("front_state", state)
    assert state["models"][0]["queue"]["queue_full"] == full_before + 2
    refusals = metric(gateway, "mlx_agent_request_refusals_total", model="org/tiny", reason="queue_full")
    assert refusals == refusals_before + 2
    assert queue(gateway)["waiting"] == 0


def test_requests_behind_a_cold_load_count_as_waiting_and_are_bounded(
    tmp_path: Path, tiny_model: Path, stopper: Callable[[int], None]
) -> None:
    """While a load is held (its worker stopped), the requests that wait for it fill --max-queue 2; a third is 503."""
    gateway = front(tmp_path, tiny_model, max_queue=2)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(gateway.chat, "cold")
            loading = until(lambda: (s := gateway.status())["model_state"] == "loading" and s["worker"] and s)
            assert loading, gateway.status()
            stopper(loading["worker"]["pid"])
            second = pool.submit(gateway.chat, "also cold")
            assert until(lambda: queue(gateway)["waiting"] == 2)
            refused = gateway.chat("one too many")
            os.killpg(loading["worker"]["pid"], signal.SIGCONT)
            assert (first.result(timeout=120).status, second.result(timeout=120).status) == (200, 200)
        assert refused.status == 503 and refused.json()["error"]["code"] == "queue_full"
        assert gateway.status()["loads"] == 1 and queue(gateway)["waiting"] == 0
    finally:
        gateway.stop()


def test_a_waiting_client_that_hangs_up_leaves_the_queue_at_once(
    one_slot: Gateway, stopper: Callable[[int], None]
) -> None:
    """A request waiting behind a busy worker is dropped from the queue when its client closes the connection."""
    gateway = one_slot
    idle(gateway)
    pid = loaded_worker(gateway)
    stopper(pid)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(gateway.chat, "held")
        assert until(lambda: queue(gateway)["running"] == 1)
        body = json.dumps({"model": "org/tiny", "messages": [{"role": "user", "content": "w"}]}).encode()
        with socket.create_connection(("127.0.0.1", gateway.port)) as client:
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{gateway.port}\r\n"
            client.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            assert until(lambda: queue(gateway)["waiting"] == 1)
            assert metric(gateway, "mlx_agent_queue_depth", model="org/tiny") == 1
        assert until(lambda: queue(gateway)["waiting"] == 0), queue(gateway)
        assert queue(gateway)["running"] == 1  # the held request still runs
        os.killpg(pid, signal.SIGCONT)
        assert running.result(timeout=120).status == 200
    assert metric(gateway, "mlx_agent_queue_depth", model="org/tiny") == 0


def test_a_stalled_worker_is_wedged_its_requests_fail_and_a_new_worker_serves(
    tmp_path: Path, tiny_model: Path, stopper: Callable[[int], None]
) -> None:
    """A worker stopped mid-request is wedged after --stall-timeout: errors, /health 503, then a new worker."""
    gateway = front(tmp_path, tiny_model, stall_timeout=2.0)
    try:
        first = loaded_worker(gateway)
        stopper(first)
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="local", timeout=120, max_retries=0)

        def stream() -> str:
            try:  # the error is a status or, once the head went out, an error event
                for _ in client.chat.completions.create(
                    model="org/tiny", messages=[{"role": "user", "content": "hi"}], stream=True, max_tokens=4
                ):
                    pass
            except openai.APIError as exc:
                return str(exc.message)
            return "completed"

        with ThreadPoolExecutor(2) as pool:
            streamed: Future[str] = pool.submit(stream)
            plain = pool.submit(gateway.chat, "plain")
            assert until(lambda: queue(gateway)["running"] == 2)
            message = streamed.result(timeout=60)
            reply = plain.result(timeout=60)
        assert "wedged" in message
        assert reply.status == 503 and reply.json()["error"]["code"] == "worker_wedged"
        status = gateway.status()
        assert status["model_state"] == "wedged" and status["worker"] is None
        assert status["last_error"]["code"] == "worker_wedged" and status["stall"]["wedged"] == 1
        assert_valid("front_state", gateway.state())
        health = gateway.request("GET", "/health")
        assert health.status == 503 and health.json()["wedged"] == ["org/tiny"]
        # serve status and stop still know the front by its proof, which it gives with the 503.
        assert front_health("127.0.0.1", gateway.port, CONTROL_TOKEN)
        assert not front_health("127.0.0.1", gateway.port, "another-token")
        assert metric(gateway, "mlx_agent_wedged_workers_total", model="org/tiny") == 1
        assert until(lambda: not psutil.pid_exists(first) or psutil.Process(first).status() == "zombie")
        assert gateway.chat("again").status == 200  # a new worker
        status = gateway.status()
        assert status["model_state"] == "loaded" and status["worker"]["pid"] != first and status["loads"] == 2
        assert gateway.request("GET", "/health").status == 200
    finally:
        gateway.stop()


def test_a_worker_stalled_on_a_plain_request_is_wedged_by_its_cpu_time(
    tmp_path: Path, tiny_model: Path, stopper: Callable[[int], None]
) -> None:
    """With only a non-streamed request running, a worker using no CPU for --stall-timeout is wedged."""
    gateway = front(tmp_path, tiny_model, stall_timeout=2.0)
    try:
        stopper(loaded_worker(gateway))
        reply = gateway.chat("plain")
        assert reply.status == 503 and reply.json()["error"]["code"] == "worker_wedged"
        assert gateway.status()["model_state"] == "wedged"
    finally:
        gateway.stop()


def test_a_request_whose_kv_cache_cannot_fit_is_refused_with_the_numbers(tmp_path: Path, tiny_model: Path) -> None:
    """With the reserve leaving ~2 GB, a reply limit whose KV cache needs far more is 503 insufficient_memory."""
    available = psutil.virtual_memory().available
    reserve_gb = max(0.0, available - 2e9) / 1e9
    gateway = front(tmp_path, tiny_model, min_headroom_gb=reserve_gb)
    try:
        huge = 2**31 - 1
        refused = gateway.chat("hi", max_tokens=huge)
        assert refused.status == 503 and refused.headers["retry-after"] == "30"
        error = refused.json()["error"]
        assert error["code"] == "insufficient_memory" and "max_tokens" in error["message"]
        memory = error["memory"]
        assert memory["max_tokens"] == huge and memory["kv_bytes"] >= huge * KV_BYTES_PER_TOKEN
        assert memory["kv_shape"] == {"layers": 2, "kv_heads": 2, "key_dim": 16, "value_dim": 16, "dtype_bytes": 4}
        assert memory["reserve_bytes"] == round(reserve_gb * 1e9) and memory["left_bytes"] < memory["peak_bytes"]
        assert gateway.status()["model_state"] == "unloaded"  # refused before any load
        assert gateway.chat("hi", max_tokens=MAX_TOKENS).status == 200  # a small one fits
        assert gateway.status()["queue"]["insufficient_memory"] == 1
        assert metric(gateway, "mlx_agent_request_refusals_total", model="org/tiny", reason="insufficient_memory") == 1
    finally:
        gateway.stop()
