"""End to end: ``serve start --hosts`` serves one model from a group of 2 ranks (ring backend over loopback, CPU).

The two hosts are both 127.0.0.1 here, so mlx.launch runs both ranks on this machine; on real Macs the same
plan reaches the other hosts over ssh (docs/distributed.md, unverified on hardware).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest

from mlx_agent.supervise.ports import port_is_free
from tests.agents_support import inside, loopback_namespace
from tests.conditions import wait_until
from tests.conftest import Agent, free_port
from tests.e2e.group_references import PROMPTS, REPLY_TOKENS
from tests.fixtures.group import in_namespace, ring_port

pytestmark = pytest.mark.e2e

LOCAL_PAIR = "127.0.0.1,127.0.0.1"
MODEL_CHECK = "expect-model"
STATUS_POLL_S = 0.2  # between two looks at ``serve status``: each is a CLI run


def group_args(model: Path, port: int, *extra: str) -> list[str]:
    """Return serve start arguments for a 2-rank group on this machine (its ring ports chosen at confirm)."""
    return ["--path", str(model), "--port", str(port), "--hosts", LOCAL_PAIR, *extra]


def replies(port: int, model: str) -> list[str]:
    """Return the greedy replies of the server on ``port`` to PROMPTS."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", timeout=120, max_retries=0)
    texts = []
    for prompt in PROMPTS:
        reply = client.chat.completions.create(
            model=model, max_tokens=REPLY_TOKENS, temperature=0, messages=[{"role": "user", "content": prompt}]
        )
        texts.append(reply.choices[0].message.content or "")
    return texts


def first_model(agent: Agent) -> dict[str, Any]:
    """Return what ``serve status`` says of the first server's first model."""
    model: dict[str, Any] = agent.run("serve", "status").data["servers"][0]["models"][0]
    return model


def status_until(agent: Agent, check: Callable[[dict[str, Any]], bool], what: str, timeout: float = 60) -> None:
    """Wait until ``check`` holds for what ``serve status`` says of the first server (each look is a CLI run)."""
    deadline = time.monotonic() + timeout
    while not check(server := agent.run("serve", "status").data["servers"][0]):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what} (last seen: {server})"
        time.sleep(STATUS_POLL_S)


def group_processes(model: Path) -> list[psutil.Process]:
    """Return the live processes whose command line serves ``model`` (launcher and ranks)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if str(model) in cmdline and any("mlx_agent.runtime" in word for word in cmdline):
            found.append(proc)
    return found


def test_a_tensor_parallel_group_replies_as_one_process_and_is_replaced_when_it_loses_a_rank(
    agent: Agent, tiny_model: Path, tiny_replies: list[str]
) -> None:
    """Two tensor-parallel ranks of the tiny llama reply as one process does, and a group that loses a rank is replaced.

    One group serves both cases in turn (each started a group of its own before): first what a running group
    shows (its greedy replies, status, ring ports and processes), then killing rank 1, which ends the group:
    status names the exit with the log tail, and the front starts a new group; stop leaves nothing.
    """
    port = free_port()
    receipt = agent.launch(*group_args(tiny_model, port))
    group = receipt["plan"]["models"][0]["group"]
    assert (group["ranks"], group["parallelism"], group["backend"]) == (2, "tensor", "ring")
    assert json.loads(Path(group["hostfile_path"]).read_text()) == group["hosts"]
    assert Path(group["hostfile_path"]) == agent.serve_dir / f"{port}.worker.hosts.json"  # the port's own, not /
    assert replies(port, tiny_model.name) == tiny_replies
    server = agent.run("serve", "status").data["servers"][0]
    assert (server["state"], server["health"], server["problems"]) == ("running", "ok", [])
    assert server["ring_ports"] == [{"model": tiny_model.name, "ports": [group["ring_port"], group["ring_port"] + 1]}]
    assert len(group_processes(tiny_model)) == 3  # the launcher and its two ranks
    # The lost rank: the group ends, status says so, and the front starts a new group.
    [launcher] = [p for p in group_processes(tiny_model) if "mlx_agent.runtime.distributed.launcher" in p.cmdline()]
    rank1 = next(c for c in launcher.children() if c.environ().get("MLX_RANK") == "1")
    os.kill(rank1.pid, signal.SIGKILL)
    wait_until(
        lambda: not launcher.is_running() or launcher.status() == psutil.STATUS_ZOMBIE, "its launcher to end", 60
    )
    status_until(agent, lambda server: server["models"][0]["worker_exits"] == 1, "the front to count the exit")
    error = first_model(agent)["last_error"]
    assert error["code"] in ("worker_exited", "generation_died") and error["details"]["log_tail"]
    assert error["details"]["ranks"], error  # which rank ended, on which host
    status_until(agent, lambda server: server["models"][0]["model_state"] == "loaded", "a new group to load", 120)
    assert replies(port, tiny_model.name)
    stopped = agent.run("serve", "stop", "--port", str(port))
    assert stopped.rc == 0, stopped.stdout + stopped.stderr
    assert stopped.data["result"] == "stopped"
    wait_until(lambda: not group_processes(tiny_model), "every process of the group to end", 60)
    assert agent.run("serve", "status").data["servers"] == []


def test_a_pipeline_group_replies_as_one_process(agent: Agent, tiny_qwen2: Path, qwen2_replies: list[str]) -> None:
    """Two ranks of a tiny qwen2 with --pipeline give one process's greedy replies."""
    port = free_port()
    receipt = agent.launch(*group_args(tiny_qwen2, port, "--pipeline"))
    assert receipt["plan"]["models"][0]["group"]["parallelism"] == "pipeline"
    assert replies(port, tiny_qwen2.name) == qwen2_replies
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def test_what_a_group_cannot_serve_is_refused_at_preview(
    agent: Agent, tiny_model: Path, tiny_qwen2: Path, tmp_path: Path
) -> None:
    """An architecture without pipelining, no weight index, a draft model, lookup, a backend mlx lacks, bad hosts."""
    port = free_port()
    llama = agent.run("serve", "start", *group_args(tiny_model, port, "--pipeline"))
    assert (
        llama.code == "distributed_unsupported"
        and "cannot pipeline model type 'llama'" in llama.doc["error"]["message"]
    )
    unindexed = tmp_path / "qwen2"
    shutil.copytree(tiny_qwen2, unindexed)
    (unindexed / "model.safetensors.index.json").unlink()
    no_index = agent.run("serve", "start", *group_args(unindexed, port, "--pipeline"))
    assert no_index.code == "distributed_unsupported" and "index" in no_index.doc["error"]["message"]
    lookup = agent.run("serve", "start", *group_args(tiny_model, port, "--prompt-lookup"))
    assert lookup.code == "distributed_unsupported" and lookup.doc["error"]["details"]["option"] == "--prompt-lookup"
    draft = agent.run("serve", "start", *group_args(tiny_model, port, "--draft-model", str(tiny_model)))
    assert draft.code == "distributed_unsupported"
    import mlx.core as mx

    if not mx.distributed.is_available("jaccl"):
        jaccl = agent.run("serve", "start", *group_args(tiny_model, port, "--backend", "jaccl"))
        assert jaccl.code == "distributed_unsupported" and jaccl.doc["error"]["details"]["backend"] == "jaccl"
    named = agent.run("serve", "start", "--path", str(tiny_model), "--port", str(port), "--hosts", "mac1,mac2")
    assert named.code == "invalid_arguments" and "IP address" in named.doc["error"]["message"]
    alone = agent.run("serve", "start", "--path", str(tiny_model), "--port", str(port), "--pipeline")
    assert alone.code == "invalid_arguments"


def test_a_hostfile_is_bound_by_its_bytes(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A --hostfile's bytes are in the plan: editing it after the preview makes the confirm stale."""
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text(
        json.dumps([{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}, {"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}])
    )
    args = ["--path", str(tiny_model), "--port", str(free_port()), "--hostfile", str(hostfile)]
    args += ["--ring-port", str(ring_port())]
    preview_hash = agent.preview_hash(*args)
    hostfile.write_text(
        json.dumps([{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}, {"ssh": "127.0.0.1", "ips": ["127.0.0.2"]}])
    )
    stale = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert stale.code == "preview_stale"
    assert any("hostfile" in c["field"] or "hosts" in c["field"] for c in stale.doc["error"]["details"]["changes"])


def test_a_taken_ring_port_is_refused_before_anything_starts(agent: Agent, tiny_model: Path) -> None:
    """A --ring-port whose run has a port taken is ring_port_in_use at preview and at confirm; nothing starts."""
    first = ring_port()
    args = ["--path", str(tiny_model), "--port", str(free_port()), "--hosts", LOCAL_PAIR, "--ring-port", str(first)]
    preview_hash = agent.preview_hash(*args)  # free at the preview
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", first + 1))  # rank 1's link port
        squatter.listen()
        preview = agent.run("serve", "start", *args)
        result = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    for refused in (preview, result):
        assert refused.rc == 1 and refused.code == "ring_port_in_use", refused.stdout
        assert refused.doc["error"]["details"]["taken"] == [first + 1] and refused.doc["error"]["remediation"]
    assert agent.run("serve", "status").data["servers"] == []
    assert not group_processes(tiny_model)


# The squatter: hold mlx.launch's default link ports (32323, 32324) and say which it holds, until stdin ends.
SQUAT = """
import socket, sys
held = []
for port in (32323, 32324):
    s = socket.socket()
    s.bind(("127.0.0.1", port)); s.listen(); held.append(s)
print("squatting", *(s.getsockname()[1] for s in held), flush=True)
sys.stdin.read()
"""


def test_a_second_user_on_the_default_ring_port_does_not_block_a_group(
    agent: Agent, tiny_model: Path, attacker: pwd.struct_passwd
) -> None:
    """Another user listening on 32323-32324 (mlx.launch's default links) blocks nothing: confirm picks free ports.

    The CLI, the front, the group and the squatter share a network namespace of the test's own (only loopback),
    so the squatter surely holds both ports and nothing else on the machine does.
    """
    with loopback_namespace() as namespace:
        cli = inside(agent, namespace)
        setpriv = ["setpriv", f"--reuid={attacker.pw_uid}", f"--regid={attacker.pw_gid}", "--clear-groups"]
        squatter = subprocess.Popen(
            [*namespace.prefix, *setpriv, sys.executable, "-c", SQUAT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        try:
            assert squatter.stdout is not None and squatter.stdout.readline().split() == ["squatting", "32323", "32324"]
            assert not in_namespace(namespace.name, lambda: port_is_free(32323) or port_is_free(32324))
            port = free_port()
            args = ["--path", str(tiny_model), "--port", str(port), "--hosts", LOCAL_PAIR]
            plan = cli.run("serve", "start", *args).data["plan"]
            human = cli.run("serve", "start", *args, check_json=False).stdout
            assert "ring ports chosen at confirm" in " ".join(human.replace("│", " ").split())  # the cell wraps
            receipt = cli.launch(*args)  # the old fixed default: launch_failed, rank 0 cannot bind 32323
            assert plan["models"][0]["group"]["ring_port"] is None and plan["models"][0]["group"]["ring_port_chosen"]
            chosen = receipt["plan"]["models"][0]["group"]["ring_port"]
            assert isinstance(chosen, int) and not {chosen, chosen + 1} & {32323, 32324}
            argv = receipt["plan"]["models"][0]["worker"]["argv"]
            assert argv[argv.index("--starting-port") + 1] == str(chosen)
            assert receipt["preview_hash"] == plan["preview_hash"]
            assert in_namespace(namespace.name, lambda: replies(port, tiny_model.name))
            [server] = cli.run("serve", "status").data["servers"]
            assert server["ring_ports"] == [{"model": tiny_model.name, "ports": [chosen, chosen + 1]}]
            human = cli.run("serve", "status", check_json=False).stdout
            assert f"{tiny_model.name} ring links on ports {chosen}-{chosen + 1}" in " ".join(human.split())
            assert cli.run("serve", "stop", "--port", str(port)).rc == 0
            wait_until(lambda: not group_processes(tiny_model), "every process of the group to end", 60)
        finally:
            squatter.kill()
            squatter.wait()


def test_a_jit_group_loads_on_request_is_degraded_by_a_lost_rank_and_unloads_whole(
    agent: Agent, tiny_model: Path
) -> None:
    """Under --jit the group starts on the first request, a lost rank degrades it until the next, an unload ends it.

    One front serves the three cases in turn (the first two started a front of their own before): the first
    request starts every rank, rank 0 reporting its own share of the weights; a group whose rank died stays
    failed, status degraded naming the rank, host and log tail, until the next request starts a new group; and
    an unload stops every rank.
    """
    port = free_port()
    receipt = agent.launch(*group_args(tiny_model, port, "--jit"))
    assert not group_processes(tiny_model)
    assert replies(port, tiny_model.name)
    assert len(group_processes(tiny_model)) == 3
    [rank0] = [p for p in group_processes(tiny_model) if p.environ().get("MLX_RANK") == "0"]
    report = Path(rank0.environ()["MLX_AGENT_PROGRESS_FILE"])  # in the front's private directory
    load = json.loads(report.read_text())["load"]  # rank 0 reports its own share of the weights, read in parts
    whole = sum(f.stat().st_size for f in tiny_model.glob("*.safetensors"))
    assert load["done"] and 0 < load["loaded_bytes"] == load["total_bytes"] < whole, (load, whole)
    # The lost rank: degraded until the next request.
    [launcher] = [p for p in group_processes(tiny_model) if "mlx_agent.runtime.distributed.launcher" in p.cmdline()]
    rank1 = next(c for c in launcher.children() if c.environ().get("MLX_RANK") == "1")
    os.kill(rank1.pid, signal.SIGKILL)
    status_until(agent, lambda server: server["health"] == "degraded", "status degraded")
    server = agent.run("serve", "status").data["servers"][0]
    [problem] = server["problems"]
    assert problem["model"] == tiny_model.name and problem["log_tail"]
    assert {"rank": 1, "host": "127.0.0.1"}.items() <= problem["ranks"][0].items(), problem
    human = agent.run("serve", "status", check_json=False)
    assert "worker_exited" in human.stdout or "generation_died" in human.stdout
    assert replies(port, tiny_model.name)  # the next request starts a new group
    assert agent.run("serve", "status").data["servers"][0]["health"] == "ok"
    # The unload: every rank of the new group stops.
    assert agent.run("serve", "unload", "--port", str(port), "--expected-pid", str(receipt["pid"])).rc == 0
    wait_until(lambda: not group_processes(tiny_model), "every process of the group to end", 60)
    assert first_model(agent)["model_state"] == "unloaded"
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0
    assert agent.run("serve", "status").data["servers"] == []


def test_a_model_changed_after_the_preview_refuses_the_group(agent: Agent, model_copy: Path) -> None:
    """A group's model file edited between preview and confirm is preview_stale naming that file."""
    args = group_args(model_copy, free_port())
    preview_hash = agent.preview_hash(*args)
    config = json.loads((model_copy / "config.json").read_text())
    (model_copy / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    stale = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert stale.code == "preview_stale"
    fields = [c["field"] for c in stale.doc["error"]["details"]["changes"]]
    assert f"models[{model_copy.name}].source.files[config.json].sha256" in fields
    assert any(MODEL_CHECK in f or "worker.argv" in f for f in fields)  # every rank's own check changed with it
    assert agent.run("serve", "status").data["servers"] == []
