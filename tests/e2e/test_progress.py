"""A slow cold load and a slow prefill show growing progress in status and /metrics, and a stream stays alive.

The real wrapped worker on the tiny model (mlx_lm's, and mlx_vlm's on the tiny Qwen2-VL model) is made slow in
the test only: it starts through ``SLOW_WORKER``, which makes every ``mlx.core.eval`` (and ``async_eval``, with
which mlx_vlm's prefill steps end) sleep first, so each part of the load (``runtime/serving/progress.py`` reads
the weights in about 50 parts) and each prefill step (``--prefill-step-size 64``) takes a while. The client is a
real HTTP client whose every read must see bytes within ``CLIENT_IDLE_S``: a dead stream fails it.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.wire import SOCKET_FLAG
from tests.conftest import free_port
from tests.fixtures.tiny_vlm import build_tiny_vlm
from tests.gateway_support import Gateway, gateway_config, real_worker_argv, running_gateway, start_gateway

pytestmark = pytest.mark.e2e

CLIENT_IDLE_S = 5.0  # the longest silence a client here allows between two reads
EVAL_DELAY_S = 0.1
SLOW_WORKER = """
import runpy, sys, time
import mlx.core as mx
DELAY = float(sys.argv.pop(1))
def slowed(evaluate):
    def slow(*args, **kwargs):
        time.sleep(DELAY)
        return evaluate(*args, **kwargs)
    return slow
mx.eval = slowed(mx.eval)
mx.async_eval = slowed(mx.async_eval)
sys.argv[0] = "mlx_agent.runtime"
runpy.run_module("mlx_agent.runtime", run_name="__main__", alter_sys=True)
"""
# Words the tiny tokenizer splits into many tokens: the prompt's prefill takes ~20 steps of 64 tokens.
LONG_PROMPT = " ".join(f"item{i} value{i * 7}" for i in range(160))


def slow_argv(directory: Path, model: Path, runtime: str = "mlx_lm") -> list[str]:
    """Return the worker's argv: the real entry through the slowing wrapper, prefilled 64 tokens a step."""
    script = directory / "slow_worker.py"
    script.write_text(SLOW_WORKER)
    real = real_worker_argv(model, 4)
    real[3] = runtime
    return [sys.executable, str(script), str(EVAL_DELAY_S), *real[3:], "--prefill-step-size", "64"]


def stream(gateway: Gateway, content: str, out: dict[str, Any]) -> None:
    """Stream a chat completion, each read allowed ``CLIENT_IDLE_S``; keep the status and the body in ``out``."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=CLIENT_IDLE_S)
    try:
        body = {
            "model": "org/tiny",
            "stream": True,
            "max_tokens": 4,
            "messages": [{"role": "user", "content": content}],
        }
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        pieces = []
        while piece := resp.read1(65536):
            pieces.append(piece)
        out["status"], out["body"] = resp.status, b"".join(pieces)
    except Exception as exc:  # the main thread reports it
        out["error"] = repr(exc)
    finally:
        conn.close()


def gauge(gateway: Gateway, name: str) -> float:
    """Return one gauge of ``/metrics`` for the model."""
    text = gateway.request("GET", "/metrics").body.decode()
    line = next(x for x in text.splitlines() if x.startswith(f'{name}{{model="org/tiny"}}'))
    return float(line.split()[-1])


def watch(gateway: Gateway, done: threading.Event) -> tuple[list[float], list[float], list[float], list[float]]:
    """Poll status until ``done``; return the load and prefill fractions seen, and those /metrics gave."""
    loads: list[float] = []
    prefills: list[float] = []
    load_gauges: list[float] = []
    prefill_gauges: list[float] = []
    while not done.is_set():
        model = gateway.state()["models"][0]
        progress = model["load_progress"]
        if model["model_state"] == "loading" and progress is not None and progress["fraction"] is not None:
            loads.append(progress["fraction"])
            assert progress["total_bytes"] > 0 and progress["loaded_bytes"] <= progress["total_bytes"], progress
            if 0 < progress["fraction"] < 1 and len(load_gauges) < 3:
                load_gauges.append(gauge(gateway, "mlx_agent_load_progress"))
        for entry in model["prefill"]:
            prefills.append(entry["fraction"])
            if len(prefill_gauges) < 3:
                prefill_gauges.append(gauge(gateway, "mlx_agent_prefill_progress"))
        time.sleep(0.05)
    return loads, prefills, load_gauges, prefill_gauges


def watched_stream(gateway: Any) -> tuple[dict[str, Any], tuple[list[float], ...]]:
    """Stream the long prompt while ``watch`` reads progress; return the stream's outcome and what was seen."""
    out: dict[str, Any] = {}
    client = threading.Thread(target=stream, args=(gateway, LONG_PROMPT, out))
    done = threading.Event()
    client.start()
    try:
        seen: dict[str, tuple[list[float], ...]] = {}
        watcher = threading.Thread(target=lambda: seen.update(result=watch(gateway, done)))
        watcher.start()
        client.join(timeout=300)
    finally:
        done.set()
    watcher.join(timeout=30)
    return out, seen["result"]


def test_slow_load_and_prefill_show_progress(tmp_path: Path, tiny_model: Path) -> None:
    """A cold load's bytes read and a prefill's tokens read grow in status and /metrics while the stream lives."""
    with running_gateway(tmp_path, slow_argv(tmp_path, tiny_model), model_path=tiny_model) as gateway:
        assert gateway.status()["model_state"] == "unloaded"
        out, (loads, prefills, load_gauges, prefill_gauges) = watched_stream(gateway)
        assert "error" not in out, out
        assert out["status"] == 200 and out["body"].rstrip().endswith(b"data: [DONE]"), out
        assert b": keepalive" in out["body"]  # the load and the prefill outlast the front's keep-alive period
        assert len(set(loads)) >= 3 and loads == sorted(loads), loads  # read in parts, never going back
        assert any(0 < f < 1 for f in loads), loads
        assert len(set(prefills)) >= 3 and prefills == sorted(prefills), prefills
        assert all(0 < g <= 1 for g in load_gauges) and load_gauges, load_gauges
        assert all(0 < g < 1 for g in prefill_gauges) and prefill_gauges, prefill_gauges
        after = gateway.state()["models"][0]
        assert after["load_progress"] is None and after["prefill"] == []  # done: nothing left in progress
        assert after["window"]["prefill_tokens_per_second"] > 0
        assert after["worker_rss_bytes"] > 0
        assert gauge(gateway, "mlx_agent_worker_resident_bytes") > 0


def test_the_vlm_worker_shows_its_slow_load_and_prefill(tmp_path: Path) -> None:
    """The wrapped mlx-vlm worker's weights read and prompt tokens read grow in status while the stream lives."""
    model = build_tiny_vlm(tmp_path / "tiny-qwen2-vl")
    argv = slow_argv(tmp_path, model, "mlx-vlm")
    assert argv[argv.index(SOCKET_FLAG) + 1] == "{socket}", argv
    config = gateway_config(tmp_path, free_port(), argv, model_path=model)
    worker = config["models"][0]["worker"]
    worker["model_name"] = str(model)  # mlx_vlm serves its model under its path
    worker["readiness"] = {"path": "/health", "status": 200, "json": {"status": "healthy"}, "nonnull": ["loaded_model"]}
    gateway = start_gateway(tmp_path, config)
    try:
        out, (loads, prefills, _, prefill_gauges) = watched_stream(gateway)
        assert "error" not in out, out
        assert out["status"] == 200 and out["body"].rstrip().endswith(b"data: [DONE]"), out
        assert len(set(loads)) >= 3 and loads == sorted(loads), loads  # read in parts, never going back
        assert any(0 < f < 1 for f in loads), loads
        assert len(set(prefills)) >= 3 and prefills == sorted(prefills), prefills
        assert all(0 < g < 1 for g in prefill_gauges) and prefill_gauges, prefill_gauges
        after = gateway.state()["models"][0]
        assert after["load_progress"] is None and after["prefill"] == []  # done: nothing left in progress
        assert after["window"]["prefill_tokens_per_second"] > 0
    finally:
        gateway.stop()
