"""The gateway as a real process over a stand-in worker: shared cold loads, unload, idle, admission, failures."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from mlx_agent.resources import PACKAGE_DIR
from tests.conftest import assert_valid
from tests.gateway_support import Gateway, pid_alive, running_gateway, squatting
from tests.standin_fronts import settled

STREAM_BODY = {"model": "org/tiny", "messages": [{"role": "user", "content": "go"}], "stream": True}


class OpenStream:
    """A streaming chat request read event by event from a raw socket."""

    def __init__(self, gateway: Gateway, **fields: Any) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
        self.conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps({**STREAM_BODY, **fields}),
            headers={"Content-Type": "application/json"},
        )
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200

    def next_event(self) -> bytes:
        """Return the next SSE event (a timeout fails the test instead of hanging)."""
        lines: list[bytes] = []
        while True:
            line = self.resp.readline()
            if not line:
                return b"".join(lines)
            if line == b"\n":
                return b"".join(lines)
            lines.append(line)

    def rest(self) -> bytes:
        """Read the stream to its end."""
        data = self.resp.read()
        self.conn.close()
        return data


def wait_for(predicate: Any, timeout: float = 30) -> None:
    """Poll ``predicate`` until true (a wait for a state, never a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def worker_pids_in_log(gateway: Gateway) -> list[int]:
    """Return the pids the stand-in worker printed, one per load."""
    return [int(p) for p in re.findall(r"fake worker: loading pid=(\d+)", gateway.worker_log.read_text())]


def test_health_and_models_answer_before_any_load(standin: Gateway) -> None:
    """/health says ok and unloaded, /v1/models lists the model, and nothing has been loaded by reading them."""
    gateway = standin  # the shared front, its model unloaded: what it has loaded so far is counted from here
    loads = gateway.status()["loads"]
    health = gateway.request("GET", "/health").json()
    assert [(d["place"], d["low"]) for d in health.pop("disk")] == [("state", False)]
    assert health == {
        "status": "ok",
        "ready": True,
        "model_state": "unloaded",
        "models": {"org/tiny": "unloaded"},
    }
    models = gateway.request("GET", "/v1/models").json()
    assert [(m["id"], m["state"]) for m in models["data"]] == [("org/tiny", "unloaded")]
    status = gateway.status()
    assert_valid("front_state", gateway.state())
    assert (status["model_state"], status["loads"], status["worker"]) == ("unloaded", loads, None)
    assert status["pid"] == gateway.proc.pid


def test_sixteen_concurrent_cold_requests_share_one_load(tmp_path: Path) -> None:
    """Sixteen requests arriving while unloaded all succeed through exactly one worker load."""
    with running_gateway(tmp_path, env={"FAKE_LOAD_DELAY": "1"}) as gateway:
        with ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(lambda i: gateway.chat(f"request {i}"), range(16)))
        assert [r.status for r in replies] == [200] * 16
        status = gateway.status()
        assert (status["loads"], status["model_state"]) == (1, "loaded")
        assert gateway.worker_loads() == 1 and len(worker_pids_in_log(gateway)) == 1
        assert_valid("front_state", gateway.state())


def test_unload_is_blocked_by_an_open_stream_then_succeeds(standin: Gateway) -> None:
    """Unload during a stream is 409 unload_blocked with counts; once the stream ends it unloads."""
    gateway = standin  # the shared front: it ends unloaded, as each test finds it
    stream = OpenStream(gateway, x_chunks=40, x_delay=0.05)
    assert stream.next_event().startswith(b": keepalive")
    blocked = gateway.control("POST", "unload")
    assert blocked.status == 409
    error = blocked.json()["error"]
    assert (error["code"], error["open_requests"], error["open_streams"]) == ("unload_blocked", 0, 1)
    body = stream.rest()
    assert body.rstrip().endswith(b"data: [DONE]")
    wait_for(lambda: gateway.status()["open_streams"] == 0)
    worker_pid = gateway.status()["worker"]["pid"]
    done = gateway.control("POST", "unload")
    assert done.status == 200 and done.json()["unloaded"] is True
    assert gateway.status()["model_state"] == "unloaded"
    assert not pid_alive(worker_pid)
    assert gateway.request("GET", "/health").status == 200


def test_sse_passes_through_event_by_event_with_keepalives(standin: Gateway) -> None:
    """Each event reaches the client while the worker is still generating, keepalive comment included."""
    gateway = standin  # the shared front
    stream = OpenStream(gateway, x_chunks=3, x_delay=0.3)
    assert stream.next_event() == b": keepalive 1/1\n"
    first = stream.next_event()
    assert first.startswith(b"data: ") and json.loads(first[6:])["model"] == "org/tiny"
    assert gateway.status()["open_streams"] == 1  # the rest is still being generated
    assert stream.rest().count(b"data: ") == 3


def test_idle_timeout_unloads_only_after_the_last_stream_ends(tmp_path: Path) -> None:
    """With idle_timeout set, a long stream keeps the worker; after it ends the worker is unloaded."""
    policy = {"idle_timeout": 0.5, "keep_loaded": False, "min_headroom_gb": None}
    with running_gateway(tmp_path, policy=policy) as gateway:
        stream = OpenStream(gateway, x_chunks=20, x_delay=0.1)
        stream.next_event()
        time.sleep(1.0)  # longer than the idle timeout, while the stream is open
        assert gateway.status()["model_state"] == "loaded"
        stream.rest()
        worker_pid = gateway.status()["worker"]["pid"]
        state = gateway.wait_state("unloaded")
        assert state["model_state"] == "unloaded" and state["worker"] is None
        wait_for(lambda: not pid_alive(worker_pid))
        assert gateway.chat().status == 200
        assert gateway.status()["loads"] == 2


def test_keep_loaded_prevents_idle_unload(tmp_path: Path) -> None:
    """keep_loaded leaves the worker loaded past the idle timeout; manual unload still works."""
    policy = {"idle_timeout": 0.2, "keep_loaded": True, "min_headroom_gb": None}
    with running_gateway(tmp_path, policy=policy) as gateway:
        assert gateway.chat().status == 200
        time.sleep(1.0)
        status = gateway.status()
        assert status["model_state"] == "loaded" and status["idle_unload_at"] is None
        assert gateway.control("POST", "unload").status == 200


def test_huge_reserve_is_refused_with_numbers_and_retry_after(tmp_path: Path) -> None:
    """A reserve no machine has gives 503 insufficient_headroom with the estimate; the gateway stays up."""
    policy = {"idle_timeout": 0, "keep_loaded": False, "min_headroom_gb": 10**9}
    with running_gateway(tmp_path, policy=policy) as gateway:
        reply = gateway.chat()
        assert reply.status == 503 and int(reply.headers["retry-after"]) > 0
        error = reply.json()["error"]
        check = error["memory_check"]
        assert error["code"] == "insufficient_headroom"
        assert check["required_bytes"] > check["available_bytes"] > 0
        assert check["reserve_bytes"] == 10**18 and check["weight_bytes"] == 1000
        status = gateway.status()
        assert_valid("front_state", gateway.state())
        assert (status["model_state"], status["loads"], status["load_blocked_reason"]) == (
            "unloaded",
            0,
            "insufficient_headroom",
        )
        assert status["memory_check"]["ok"] is False and status["memory_check"]["enforced"] is True
        assert gateway.request("GET", "/health").status == 200


def test_unknown_weight_size_is_memory_unknown(tmp_path: Path) -> None:
    """With a reserve set and no weight size, a cold load is 503 memory_unknown."""
    policy = {"idle_timeout": 0, "keep_loaded": False, "min_headroom_gb": 1}
    with running_gateway(tmp_path, policy=policy, weight_bytes=None) as gateway:
        reply = gateway.chat()
        assert (reply.status, reply.json()["error"]["code"]) == (503, "memory_unknown")
        assert "retry-after" in reply.headers
        assert gateway.status()["load_blocked_reason"] == "memory_unknown"


def test_worker_killed_mid_stream_gives_an_error_and_the_next_request_reloads(tmp_path: Path) -> None:
    """Killing the worker mid-stream ends the openai client's stream with an error; the next request loads again."""
    with running_gateway(tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="unused", timeout=30, max_retries=0)
        stream = client.chat.completions.create(
            model="org/tiny",
            messages=[{"role": "user", "content": "go"}],
            stream=True,
            extra_body={"x_chunks": 200, "x_delay": 0.05},
        )
        chunks = iter(stream)
        next(chunks)
        worker_pid = gateway.status()["worker"]["pid"]
        os.kill(worker_pid, signal.SIGKILL)
        with pytest.raises(openai.APIError, match=r"ended the stream|broke"):
            for _ in chunks:
                pass
        state = gateway.wait_state("failed")
        assert state["last_error"]["code"] == "worker_exited" and state["worker"] is None
        assert_valid("front_state", gateway.state())
        assert gateway.chat().status == 200
        assert gateway.status()["loads"] == 2 and gateway.proc.poll() is None


def test_worker_that_cannot_load_is_failed_and_retried(tmp_path: Path) -> None:
    """A worker exiting before ready gives 503 load_failed and state failed with its log tail; the gateway lives."""
    with running_gateway(tmp_path, env={"FAKE_FAIL": "1"}) as gateway:
        reply = gateway.chat()
        assert (reply.status, reply.json()["error"]["code"]) == (503, "load_failed")
        status = gateway.status()
        assert status["model_state"] == "failed" and status["last_error"]["code"] == "launch_failed"
        assert "fake worker: cannot load" in "\n".join(status["last_error"]["details"]["log_tail"])
        assert gateway.chat().status == 503 and gateway.status()["loads"] == 2
        assert gateway.request("GET", "/health").status == 200


def file_check(path: Path) -> dict[str, Any]:
    """Return the file_checks entry binding ``path``'s current content."""
    data = path.read_bytes()
    return {"path": str(path), "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


# What the bound front's plan bound, as planned: an adapter file, a runtime file and a draft model's config.
PLANNED = {
    "adapters.safetensors": b"planned adapter",
    "server.py": b"# the reviewed runtime\n",
    "draft/config.json": b'{"vocab_size": 512}',
}


@dataclass
class Bound:
    """A front whose plan binds the files ``PLANNED`` (in ``directory``): each test changes one of them."""

    directory: Path
    gateway: Gateway | None = None

    @property
    def front(self) -> Gateway:
        """Return the running front."""
        assert self.gateway is not None
        return self.gateway

    @property
    def adapter(self) -> Path:
        """Return the bound adapter file."""
        return self.directory / "adapters.safetensors"

    @property
    def runtime(self) -> Path:
        """Return the bound runtime file."""
        return self.directory / "server.py"

    @property
    def draft(self) -> Path:
        """Return the bound draft model's directory."""
        return self.directory / "draft"

    def as_planned(self) -> None:
        """Write every bound file back as the plan bound it."""
        for name, data in PLANNED.items():
            (self.directory / name).write_bytes(data)


@pytest.fixture(scope="module")
def bound_front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bound]:
    """Run one front whose plan binds an adapter, a runtime file and a draft model, for the tests that change one."""
    from mlx_agent.identity import directory_identity

    bound = Bound(tmp_path_factory.mktemp("bound"))
    bound.draft.mkdir()
    bound.as_planned()
    source = {"kind": "path", "path": str(bound.draft), "model_type": None, "files": directory_identity(bound.draft)}
    adapter, runtime = [file_check(bound.adapter)], [file_check(bound.runtime)]
    with running_gateway(bound.directory, draft_source=source, file_checks=adapter, runtime_checks=runtime) as gateway:
        bound.gateway = gateway
        yield bound


@pytest.fixture
def bound(bound_front: Bound) -> Iterator[Bound]:
    """Return the bound front with every file as planned, settled; after the test, put them back and settle it."""
    bound_front.as_planned()
    settled(bound_front.front)
    yield bound_front
    bound_front.as_planned()
    settled(bound_front.front)


def test_changed_adapter_fails_the_load_before_a_worker_starts(bound: Bound) -> None:
    """An adapter file changed since the plan fails the load with adapter_changed and starts no worker."""
    gateway, adapter = bound.front, bound.adapter  # the module's bound front: its loads counted from here
    loads = gateway.status()["loads"]
    adapter.write_bytes(b"swapped adapter")
    reply = gateway.chat()
    assert (reply.status, reply.json()["error"]["code"]) == (503, "adapter_changed")
    status = gateway.status()
    assert (status["model_state"], status["loads"], status["last_error"]["code"]) == (
        "failed",
        loads,
        "adapter_changed",
    )
    adapter.write_bytes(b"planned adapter")
    assert gateway.chat().status == 200


def test_a_changed_runtime_source_fails_the_load(bound: Bound) -> None:
    """A runtime file the plan bound (interpreter, entry or runtime source) changed since: runtime_changed, no load."""
    gateway, patched = bound.front, bound.runtime  # the module's bound front: its loads counted from here
    loads = gateway.status()["loads"]
    patched.write_text("# an edited runtime\n")
    reply = gateway.chat()
    assert (reply.status, reply.json()["error"]["code"]) == (503, "runtime_changed")
    assert (gateway.status()["loads"], gateway.status()["last_error"]["code"]) == (loads, "runtime_changed")


def test_a_front_only_change_leaves_the_reviewed_worker_loadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a package copy, a family's declaration or a command's error edited: the worker loads; bodies.py: not."""
    from mlx_agent.plan import front as plan_front
    from mlx_agent.plan import runtime as plan_runtime

    copy = tmp_path / "copy" / "mlx_agent"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(plan_runtime, "PACKAGE_DIR", copy)
    monkeypatch.setattr(plan_runtime, "ENTRY_DIR", copy / "runtime")
    reviewed = plan_runtime.runtime_checks({"entry_sources": plan_runtime.entry_sources()})  # as a plan binds them
    assert {Path(c["path"]).parent for c in reviewed} >= {copy, copy / "runtime"}
    front_before = plan_front.front_sources()

    front_only = copy / "gateway" / "anthropic" / "bodies.py"  # MessagesBody: the front reads it, no worker does
    front_only.write_text(front_only.read_text() + "\n# an edit of a front-only declaration\n")
    commands_only = copy / "errors" / "commands.py"  # a command's error: no server process raises it
    commands_only.write_text(
        commands_only.read_text() + "\n\nclass NewCommandError(MlxAgentError):\n    code = 'new'\n"
    )
    with running_gateway(tmp_path, runtime_checks=reviewed) as gateway:
        assert gateway.chat().status == 200 and gateway.status()["loads"] == 1
        assert gateway.control("POST", "unload").status == 200
        worker_module = copy / "bodies.py"  # ChatBody: the worker checks every chat body with it
        worker_module.write_text(worker_module.read_text() + "\n# an edit of a declaration the worker runs\n")
        reply = gateway.chat()
        assert (reply.status, reply.json()["error"]["code"]) == (503, "runtime_changed")
        assert [Path(c["path"]) for c in gateway.status()["last_error"]["details"]["changed"]] == [worker_module]
    monkeypatch.setattr("mlx_agent.resources.PACKAGE_DIR", copy)  # the front binds the front-only edit
    assert plan_front.front_sources()["gateway/anthropic/bodies.py"] != front_before["gateway/anthropic/bodies.py"]
    assert "errors/commands.py" not in plan_front.front_sources()  # nor does the front bind the commands' errors


def test_a_changed_draft_model_fails_the_load(bound: Bound) -> None:
    """The draft model's bound files changed since the plan: model_changed naming the draft, nothing loads."""
    gateway, draft = bound.front, bound.draft  # the module's bound front: its loads counted from here
    loads = gateway.status()["loads"]
    (draft / "config.json").write_text('{"vocab_size": 513}')
    reply = gateway.chat()
    assert (reply.status, reply.json()["error"]["code"]) == (503, "model_changed")
    error = gateway.status()["last_error"]
    assert error["details"]["draft"] is True and error["details"]["path"] == str(draft)
    assert "draft model" in error["message"] and gateway.status()["loads"] == loads


def test_adapter_changed_during_a_load_stops_the_new_worker(tmp_path: Path) -> None:
    """The recheck after a load catches a change made while it loaded, and that worker is stopped."""
    adapter = tmp_path / "adapters.safetensors"
    adapter.write_bytes(b"planned adapter")
    with running_gateway(tmp_path, file_checks=[file_check(adapter)], env={"FAKE_LOAD_DELAY": "1.5"}) as gateway:
        replies: list[Any] = []
        thread = threading.Thread(target=lambda: replies.append(gateway.chat()))
        thread.start()
        wait_for(lambda: gateway.status()["worker"] is not None)  # spawned: the check before the load passed
        adapter.write_bytes(b"swapped while loading")
        thread.join(60)
        assert replies[0].json()["error"]["code"] == "adapter_changed"
        status = gateway.status()
        assert status["last_error"]["details"]["checked"] == "after" and status["worker"] is None
        [pid] = worker_pids_in_log(gateway)
        wait_for(lambda: not pid_alive(pid))


def test_sigterm_stops_the_gateway_and_its_worker(tmp_path: Path) -> None:
    """TERM to the gateway's group (what serve stop sends) ends the gateway and then its worker."""
    with running_gateway(tmp_path) as gateway:
        assert gateway.chat().status == 200
        worker_pid = gateway.status()["worker"]["pid"]
        gateway.stop()
        assert gateway.proc.returncode == 0
        assert not pid_alive(worker_pid)


def test_worker_dies_with_a_killed_gateway(tmp_path: Path) -> None:
    """On Linux a gateway killed with SIGKILL takes its worker with it (parent-death signal)."""
    with running_gateway(tmp_path) as gateway:
        assert gateway.chat().status == 200
        worker_pid = gateway.status()["worker"]["pid"]
        os.killpg(gateway.proc.pid, signal.SIGKILL)
        gateway.proc.wait()
        wait_for(lambda: not pid_alive(worker_pid))


def test_client_leaving_mid_stream_frees_the_stream_and_the_worker_lives(standin: Gateway) -> None:
    """A client that hangs up mid-stream stops counting as open, so unload works, and the gateway carries on."""
    gateway = standin  # the shared front: it ends unloaded, as each test finds it
    stream = OpenStream(gateway, x_chunks=400, x_delay=0.02)
    stream.next_event()
    stream.next_event()
    stream.resp.close()
    stream.conn.close()
    wait_for(lambda: gateway.status()["open_streams"] == 0)
    assert gateway.status()["model_state"] == "loaded"
    assert gateway.chat().status == 200
    assert gateway.control("POST", "unload").status == 200


def test_a_stranger_answering_on_a_tcp_workers_port_is_refused(tmp_path: Path) -> None:
    """A program that binds a TCP worker's port before the worker and answers as ready gets no request: port_in_use."""
    import re

    with running_gateway(tmp_path, env={"FAKE_LOAD_DELAY": "3"}) as gateway:
        replies: list[Any] = []
        thread = threading.Thread(target=lambda: replies.append(gateway.chat()))
        thread.start()
        port = None
        deadline = time.monotonic() + 20
        while port is None:
            assert time.monotonic() < deadline, "the front never started a worker"
            for path in tmp_path.rglob("*.worker.log"):
                if match := re.search(r"worker load 1 on 127\.0\.0\.1:(\d+)", path.read_text(errors="replace")):
                    port = int(match.group(1))
            time.sleep(0.02)
        with squatting(port, b'{"status": "ok"}') as seen:
            thread.join(60)
        error = replies[0].json()["error"]
        assert (replies[0].status, error["code"]) == (503, "load_failed") and "another program" in error["message"]
        assert seen and all(path.startswith("/health") for path in seen)  # no prompt ever reached it
        assert gateway.status()["last_error"]["code"] == "port_in_use"
