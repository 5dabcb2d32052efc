"""The wrapped entry as a group of 2 ranks (mlx.launch's ring backend over loopback, CPU; docs/distributed.md).

Tensor parallel (the tiny llama, ``model.shard``) and pipeline (a tiny qwen2 with its weight index,
``--pipeline``) reply as one process does; only rank 0 serves HTTP; each rank rechecks its own copy of the
model; and a group whose rank 0 cannot listen, or that loses a rank or its launcher, exits as a whole with
nothing left running (``tests/fixtures/group.py`` ends each launcher's session and checks it is empty).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.identity import safetensors_header_sha256
from mlx_agent.wire import EXIT_MODEL_CHANGED, EXIT_REFUSED
from mlx_agent.worker_contract import ModelCheck
from tests.contract_support import contract
from tests.e2e.group_references import PROMPTS, greedy_body
from tests.fixtures.group import (
    Group,
    end_group,
    entry_command,
    free_port,
    launcher_argv,
    refusals,
    running_group,
    start_group,
)

pytestmark = pytest.mark.e2e

LONG = 20000  # tokens: far longer than any client here waits
STOPPED = re.compile(r"the client went away.* after \d+ tokens; generation stopped")
Chat = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture(scope="module")
def tensor_group(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Group]:
    """Serve the tiny llama from 2 ranks, tensor parallel, rank 0 on a Unix socket as behind a front."""
    with running_group(tiny_model, tmp_path_factory.mktemp("tensor"), unix=True) as group:
        yield group


def greedy_replies(ask: Chat, prompts: Sequence[str]) -> list[str]:
    """Return the greedy replies of ``ask`` (a function of a chat body) to ``prompts``."""
    return [str(ask(greedy_body(prompt))["choices"][0]["message"]["content"]) for prompt in prompts]


def model_expectations(model: Path, root: str) -> list[str]:
    """Return the contract binding ``model``'s files (its ``model_checks``), as paths under ``root``."""
    checks = []
    for path in sorted(model.iterdir()):
        size = path.stat().st_size
        if path.suffix == ".safetensors":
            checks.append(ModelCheck(f"{root}/{path.name}", "header", safetensors_header_sha256(path), size))
        else:
            checks.append(
                ModelCheck(f"{root}/{path.name}", "sha256", hashlib.sha256(path.read_bytes()).hexdigest(), size)
            )
    return contract(model_checks=tuple(checks))


def test_tensor_parallel_replies_as_one_process(tensor_group: Group, tiny_replies: list[str]) -> None:
    """Two tensor-parallel ranks give the same greedy replies as one process, and only rank 0 serves HTTP."""
    assert greedy_replies(tensor_group.chat, PROMPTS) == tiny_replies
    log = tensor_group.log()
    assert log.count("listening on unix socket") == 1 and "Starting httpd" not in log
    assert "rank 1 on" in log and "follows rank 0" in log
    assert log.index("every rank has loaded") < log.index("listening on unix socket")


def test_pipeline_replies_as_one_process(tiny_qwen2: Path, qwen2_replies: list[str], tmp_path: Path) -> None:
    """Two pipeline ranks (qwen2, --pipeline) give the same greedy replies as one process."""
    with running_group(tiny_qwen2, tmp_path, "--pipeline") as group:
        replies = greedy_replies(group.chat, PROMPTS)
        assert group.log().count("Starting httpd") == 1
    assert replies == qwen2_replies


def leave_early(group: Group, stream: bool) -> None:
    """Ask for a long seeded (so unbatched) reply, and leave: a timeout, or a stream closed after a few events."""
    body = {"messages": [{"role": "user", "content": "Talk"}], "max_tokens": LONG, "seed": 7, "stream": stream}
    connection = group.connection(timeout=1.0)
    try:
        connection.request("POST", "/v1/chat/completions", body=json.dumps(body).encode())
        if stream:
            assert connection.getresponse().read(300)
        else:
            with pytest.raises(TimeoutError):
                connection.getresponse()
    finally:
        connection.close()


@pytest.mark.parametrize("stream", [False, True], ids=["non-streaming", "streaming"])
def test_a_client_leaving_a_seeded_reply_leaves_the_group_serving(tensor_group: Group, stream: bool) -> None:
    """A client that leaves an unbatched (seeded) reply stops it on every rank; the next requests are answered."""
    seen = len(STOPPED.findall(tensor_group.log()))
    leave_early(tensor_group, stream)
    deadline = time.monotonic() + 30
    while len(STOPPED.findall(tensor_group.log())) == seen and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(STOPPED.findall(tensor_group.log())) > seen, tensor_group.log()[-3000:]
    for seed in (None, 3):  # a batched and an unbatched one: the ranks still run the same steps
        follow_up = {"messages": [{"role": "user", "content": "And now?"}], "max_tokens": 8, "seed": seed}
        answer = tensor_group.chat(follow_up, timeout=5)  # a wedged group never answers
        assert answer["usage"]["completion_tokens"] == 8


def hostfiles(group: Group) -> list[str]:
    """Return the hosts file made for each of the group's ranks (``MLX_HOSTFILE``: our launcher's or mlx.launch's)."""
    import psutil

    return [psutil.Process(pid).environ()["MLX_HOSTFILE"] for pid in group.ranks().values()]


def test_our_ranks_remove_their_hosts_files_once_the_ring_formed(tensor_group: Group) -> None:
    """Each rank's hosts file (tmp.* in the temp folder) is removed by the rank once the ring formed; it serves on."""
    made = hostfiles(tensor_group)
    assert len(set(made)) == 2 and all(Path(path).name.startswith("tmp.") for path in made)
    assert not any(os.path.lexists(path) for path in made)
    assert greedy_replies(tensor_group.chat, PROMPTS[:1])


def test_plain_mlx_launch_runs_the_entry_too(tensor_group: Group, tiny_model: Path, tmp_path: Path) -> None:
    """The entry needs nothing of our launcher: plain mlx.launch gives the same replies (and its files stay)."""
    with running_group(tiny_model, tmp_path, plain=True) as plain:
        assert greedy_replies(plain.chat, PROMPTS[:1]) == greedy_replies(tensor_group.chat, PROMPTS[:1])
        left = hostfiles(plain)
    assert all(os.path.isfile(path) for path in left)  # removed only for a launch of ours
    for path in left:
        os.unlink(path)


def test_a_changed_model_file_on_one_rank_refuses_the_group(tiny_model: Path, tmp_path: Path) -> None:
    """A rank whose own copy of the model differs exits with model_changed, naming its rank and host."""
    views = tmp_path / "views"  # each rank's "host": the same relative path, its own copy
    for rank in (0, 1):
        shutil.copytree(tiny_model, views / str(rank) / "model")
    config = views / "1" / "model" / "config.json"
    config.write_text(config.read_text().replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 1e-05'))
    command = [
        "bash",
        "-c",
        'cd "$0/$MLX_RANK" && exec "$@"',
        str(views),
        *entry_command(
            "model", "--host", "127.0.0.1", "--port", str(free_port()), *model_expectations(tiny_model, "model")
        ),
    ]
    group = start_group(Group(launcher_argv(command), tmp_path / "changed.log"))
    try:
        assert group.wait_exit() == EXIT_MODEL_CHANGED
    finally:
        end_group(group)
    assert group.launch_files_left() == []  # the ring never formed: the launcher removed the ranks' hosts files
    (refusal,) = refusals(group.log())
    details = refusal["details"]
    assert refusal["code"] == "model_changed"
    assert details["rank"] == 1 and details["host"] == socket.gethostname()
    assert [change["path"] for change in details["changed"]] == ["model/config.json"]
    assert f"model_changed: rank 1 on host {socket.gethostname()}" in group.log()


def test_model_identities_hold_for_any_copy_and_catch_changes(tiny_model: Path, tmp_path: Path) -> None:
    """Each identity method accepts a faithful copy (new inode and mtime) and names a changed file."""
    from mlx_agent.runtime.entries.file_checks import model_changes

    weights = tiny_model / "model.safetensors"
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    blob = blobs / hashlib.sha256(weights.read_bytes()).hexdigest()
    shutil.copy(weights, blob)
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(weights, copy / "model.safetensors")
    (copy / "linked.safetensors").symlink_to(blob)
    size = weights.stat().st_size
    expected = [
        ModelCheck(str(copy / "model.safetensors"), "header", safetensors_header_sha256(weights), size),
        ModelCheck(str(copy / "model.safetensors"), "size", "", size),
        ModelCheck(str(copy / "linked.safetensors"), "blob", blob.name, size),
    ]
    assert model_changes(expected) == []
    data = (copy / "model.safetensors").read_bytes()  # a tensor renamed in the header, same size
    (copy / "model.safetensors").write_bytes(data.replace(b'"lm_head.', b'"LM_head.', 1))
    other = blobs / ("0" * 64)
    shutil.copy(weights, other)
    (copy / "linked.safetensors").unlink()
    (copy / "linked.safetensors").symlink_to(other)
    reasons = [(Path(c["path"]).name, c["method"], c["reason"]) for c in model_changes(expected)]
    assert reasons == [
        ("model.safetensors", "header", "content_changed"),
        ("linked.safetensors", "blob", "content_changed"),
    ]
    (copy / "model.safetensors").write_bytes(b"short")
    assert [c["reason"] for c in model_changes(expected[1:2])] == ["size_changed"]


@pytest.mark.parametrize("taken", ["port", "socket"])
def test_rank_0_that_cannot_listen_ends_the_group(tiny_model: Path, tmp_path: Path, taken: str) -> None:
    """Rank 0 that cannot bind its port (taken) or socket (no directory) ends the whole group, non-zero."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        where = ["--host", "127.0.0.1", "--port", str(port)]
        if taken == "socket":
            where = ["--mlx-agent-socket", str(tmp_path / "missing" / "w.sock")]
        group = start_group(Group(launcher_argv(entry_command(tiny_model, *where)), tmp_path / "taken.log"))
        try:
            assert group.wait_exit() == EXIT_REFUSED
        finally:
            end_group(group)
    assert group.launch_files_left() == []  # nor the pid files of ranks that exited by themselves
    (refusal,) = refusals(group.log())
    assert refusal["code"] == ("port_in_use" if taken == "port" else "launch_failed")


def pid_files(group: Group) -> list[Path]:
    """Return the pid files mlx.launch's script wrote for the group's ranks (``mktemp`` files holding their pids)."""
    wanted = {f"{pid}\n" for pid in group.ranks().values()}
    found = []
    for path in group.launch_files_left():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if path.is_file() and path.stat().st_size < 16 and path.read_text() in wanted:
                found.append(path)
    return found


@pytest.mark.parametrize("victim", ["rank 1", "rank 0", "launcher"])
def test_losing_a_rank_or_the_launcher_ends_the_group(tiny_model: Path, tmp_path: Path, victim: str) -> None:
    """Killing one rank (SIGKILL) or the launcher (SIGKILL) makes every other process of the group exit.

    While our launcher lives, it removes the pid file of each rank that ended without its kill script, and every
    file it wrote for them: nothing of the group is left in its temp folder.
    """
    with running_group(tiny_model, tmp_path) as group:
        ranks = group.ranks()
        written = pid_files(group)
        assert len(written) == 2
        if victim == "launcher":
            os.kill(group.process.pid, signal.SIGKILL)
            group.wait_exit()
        else:
            os.kill(ranks.pop(int(victim[-1])), signal.SIGKILL)
            assert group.wait_exit() != 0
        survivors = set(ranks.values())
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in survivors) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in survivors), group.log()[-3000:]
    if victim == "launcher":  # no launcher is left to remove them: mlx.launch's own behaviour
        assert group.launch_files_left() == sorted(written)
    else:
        assert group.launch_files_left() == []


def test_sigterm_to_the_launcher_stops_every_rank(tiny_model: Path, tmp_path: Path) -> None:
    """SIGTERM to our launcher alone stops both ranks (plain mlx.launch would leave them running)."""
    with running_group(tiny_model, tmp_path) as group:
        ranks = group.ranks().values()
        os.kill(group.process.pid, signal.SIGTERM)
        assert group.wait_exit() == 128 + signal.SIGTERM
        assert not any(alive(pid) for pid in ranks)
    assert group.launch_files_left() == []  # stopped ranks' pid files and hosts files too


def test_requests_in_parallel_are_served_by_the_group(tensor_group: Group) -> None:
    """Several batched requests at once all finish in full on a group."""
    results: list[int] = []

    def ask() -> None:
        body = {"messages": [{"role": "user", "content": "Count"}], "max_tokens": 40}
        results.append(tensor_group.chat(body)["usage"]["completion_tokens"])

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results == [40] * 4


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (not a zombie)."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def test_the_launcher_exits_with_the_status_of_the_failing_rank(tmp_path: Path) -> None:
    """The launcher exits with the status of the rank that failed (plain mlx.launch exits 0), leaving no file."""
    argv = launcher_argv([sys.executable, "-c", "import os, sys; sys.exit(5 if os.environ['MLX_RANK'] == '1' else 0)"])
    group = start_group(Group(argv, tmp_path / "failing.log"))
    try:
        assert group.wait_exit() == 5, group.log()
    finally:
        end_group(group)
    assert group.launch_files_left() == []
