"""A hostile machine: another local user, planted links and squatters cannot take over or mislead a server.

The attacker is a real second user (created with ``useradd``; these tests need root, as CI runs them, and are
skipped with the reason printed otherwise). Each test stages the attack first, then checks it fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from mlx_agent import disk
from tests.conftest import FAKE_SERVER, Agent, fake_runtime, free_port
from tests.disk_support import small_disk
from tests.gateway_support import squatting


def as_user(user: pwd.struct_passwd, code: str) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` as ``user`` (no groups, no privileges) and return what happened."""
    return subprocess.run(
        ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )


def plant_receipt(agent: Agent, pid: int, version: str = "2.0") -> Path:
    """Write a 0600 receipt for port 9 naming the live process ``pid`` exactly (its group, birth and command line)."""
    proc = psutil.Process(pid)
    receipt = {
        "format_version": version,
        "kind": "serve",
        "port": 9,
        "pid": pid,
        "pgid": os.getpgid(pid),
        "create_time": proc.create_time(),
        "cmdline": proc.cmdline(),
        "argv": proc.cmdline(),
    }
    agent.serve_dir.mkdir(parents=True, exist_ok=True)
    path = agent.serve_dir / "9.json"
    path.write_text(json.dumps(receipt))
    path.chmod(0o600)
    return path


def start_args(model: Path, exe: Path, port: int) -> list[str]:
    """Return serve start arguments for a stand-in runtime."""
    return ["--path", str(model), "--runtime-executable", str(exe), "--port", str(port)]


def test_another_user_cannot_reach_or_squat_a_worker_socket(
    agent: Agent, tiny_model: Path, attacker: pwd.struct_passwd
) -> None:
    """The worker's Unix socket sits in a 0700 directory: another user can neither connect nor plant a socket."""
    port = free_port()
    receipt = agent.launch("--path", str(tiny_model), "--port", str(port), "--max-tokens", "4")
    worker = agent.run("serve", "status").data["servers"][0]["models"][0]["worker"]
    sock = Path(worker["address"])  # the plan's socket directory, or a private temporary one for a long path
    sockets = sock.parent
    assert (sockets.stat().st_mode & 0o777) == 0o700
    attempt = as_user(
        attacker,
        "import socket, sys\n"
        f"s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({str(sock)!r})\n    print('connected')\n"
        "except OSError as e:\n    print('refused', e.errno)\n"
        f"t = socket.socket(socket.AF_UNIX)\ntry:\n    t.bind({str(sockets / 'evil.sock')!r})\n    print('bound')\n"
        "except OSError as e:\n    print('refused', e.errno)\n",
    )
    assert attempt.stdout.split("\n")[:2] == ["refused 13", "refused 13"], attempt.stdout + attempt.stderr
    assert "--port" not in " ".join(receipt["plan"]["models"][0]["worker"]["argv"])  # no port in any argv
    assert agent.run("serve", "status").data["servers"][0]["health"] == "ok"


ATTACK_NATIVE_WORKER = """
import json, socket, urllib.error, urllib.request
try:
    open("/proc/{pid}/environ", "rb").read()
    print("read its key")
except OSError as e:
    print("refused", e.errno)
body = json.dumps({{"messages": [{{"role": "user", "content": "hi"}}], "max_tokens": 2}}).encode()
url = "http://127.0.0.1:{port}/v1/chat/completions"
for headers in ({{}}, {{"Authorization": "Bearer guessed"}}):
    request = urllib.request.Request(url, data=body, headers={{"Content-Type": "application/json", **headers}})
    try:
        print("answered", urllib.request.urlopen(request, timeout=30).read()[:40])
    except urllib.error.HTTPError as e:
        print("http", e.code, json.loads(e.read())["error"]["code"])
for host, reuse in (("127.0.0.1", False), ("127.0.0.1", True), ("0.0.0.0", True)):
    s = socket.socket()
    if reuse:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind((host, {port}))
        s.listen()
        print("bound")
    except OSError as e:
        print("refused", e.errno)
"""


def test_another_user_cannot_use_or_squat_a_native_mlx_lm_worker(
    agent: Agent, tiny_model: Path, attacker: pwd.struct_passwd
) -> None:
    """A native mlx_lm worker's loopback port gives another user only 401s, and that user cannot bind it."""
    exe = Path(sys.executable).parent / "mlx_lm.server"
    port = free_port()
    receipt = agent.launch(*start_args(tiny_model, exe, port), "--max-tokens", "4")
    try:
        worker = agent.run("serve", "status").data["servers"][0]["models"][0]["worker"]
        assert worker["transport"] == "tcp" and "--port" not in receipt["plan"]["models"][0]["worker"]["argv"]
        attempt = as_user(attacker, ATTACK_NATIVE_WORKER.format(pid=worker["pid"], port=worker["address"]))
        assert attempt.stdout.splitlines() == [
            "refused 13",  # the key is in the worker's environment, which only its own user reads
            "http 401 invalid_api_key",
            "http 401 invalid_api_key",
            "refused 98",  # EADDRINUSE, with or without SO_REUSEADDR/SO_REUSEPORT
            "refused 98",
            "refused 98",
        ], attempt.stdout + attempt.stderr
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as answer:  # its front still reaches it
            assert answer.status == 200 and json.loads(answer.read())["choices"]
        assert agent.run("serve", "status").data["servers"][0]["models"][0]["worker"]["pid"] == worker["pid"]
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def test_a_squatter_on_the_port_is_port_in_use_not_a_ready_server(
    agent: Agent, tiny_model: Path, tmp_path: Path
) -> None:
    """A process that answers /health as a ready front on the port makes confirm port_in_use; nothing is left."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="quick-server")
    port = free_port()
    args = start_args(tiny_model, exe, port)
    preview_hash = agent.preview_hash(*args)
    with squatting(port, b'{"status": "ok", "ready": true, "proof": "forged"}'):
        result = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert (result.rc, result.code) == (1, "port_in_use"), result.stdout
    assert agent.run("serve", "status").data["servers"] == []


def test_another_homes_server_on_the_port_is_port_in_use(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A server of another MLX_AGENT_HOME on the port makes this home's preview and confirm port_in_use."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="quick-server")
    port = free_port()
    args = start_args(tiny_model, exe, port)
    other_home = tmp_path / "other-home"
    other_home.mkdir()
    other = Agent(other_home, {**agent.env, "MLX_AGENT_HOME": str(other_home)})
    preview_hash = agent.preview_hash(*args)  # reviewed while the port was free
    other.launch(*args)
    try:
        assert agent.run("serve", "start", *args).code == "port_in_use"
        confirm = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
        assert (confirm.rc, confirm.code) == (1, "port_in_use")
        assert agent.run("serve", "status").data["servers"] == []
        assert other.run("serve", "status").data["servers"][0]["health"] == "ok"
    finally:
        other.run("serve", "stop", "--port", str(port))


def test_a_front_answers_a_challenge_only_with_its_own_token(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """Readiness and status trust a port only when its answer proves the receipt's control token."""
    import copy

    from mlx_agent.supervise.readiness import front_answers, probe
    from mlx_agent.supervise.receipts import has_front, read_receipt

    exe = fake_runtime(tmp_path, FAKE_SERVER, name="quick-server")
    port = free_port()
    agent.launch(*start_args(tiny_model, exe, port))
    receipt = read_receipt(agent.serve_dir / f"{port}.json")
    assert has_front(receipt)
    assert front_answers(receipt)
    record = {"path": "/health", "status": 200}
    assert not probe("127.0.0.1", port, record, 1.0, token="not-the-token")  # type: ignore[arg-type]
    forged = copy.deepcopy(receipt)
    other = tmp_path / "other.token"
    other.write_text("someone-else\n")
    other.chmod(0o600)
    forged["plan"]["front"]["token_path"] = str(other)
    assert not front_answers(forged)


def test_a_receipts_directory_others_can_write_is_refused(agent: Agent, attacker: pwd.struct_passwd) -> None:
    """A state directory writable by group or others, or owned by another user, is state_dir_unsafe."""
    serve = agent.serve_dir
    serve.mkdir(parents=True)
    serve.chmod(0o777)
    assert agent.run("serve", "status").code == "state_dir_unsafe"
    serve.chmod(0o700)
    os.chown(serve, attacker.pw_uid, attacker.pw_gid)
    refused = agent.run("serve", "status")
    assert refused.code == "state_dir_unsafe" and str(serve) in refused.doc["error"]["message"]
    os.chown(serve, os.getuid(), os.getgid())
    assert agent.run("serve", "status").rc == 0


def test_a_receipt_planted_by_another_user_is_not_obeyed(agent: Agent, attacker: pwd.struct_passwd) -> None:
    """A receipt file another user owns (here: naming our own live process) is unreadable: nothing is signalled."""
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = plant_receipt(agent, victim.pid)
        os.chown(path, attacker.pw_uid, attacker.pw_gid)
        stop = agent.run("serve", "stop", "--port", "9")
        assert stop.code == "state_dir_unsafe", stop.stdout
        time.sleep(0.2)
        assert victim.poll() is None  # still alive
    finally:
        victim.kill()
        victim.wait()


def test_a_receipt_naming_the_commands_own_group_is_not_obeyed(agent: Agent) -> None:
    """A receipt naming the process group the CLI itself runs in (here: this test's) is refused; nothing dies."""
    path = plant_receipt(agent, os.getpid())  # this test's process, in the group the CLI runs in too
    stop = agent.run("serve", "stop", "--port", "9")
    assert (stop.rc, stop.code) == (1, "ownership_mismatch"), stop.stdout + stop.stderr
    assert "Traceback" not in stop.stderr and path.exists()


def test_an_unreadable_receipts_directory_is_an_error_not_an_empty_list(attacker: pwd.struct_passwd) -> None:
    """A receipts directory its owner cannot list makes status state_dir_unsafe instead of 'no servers'."""
    home = Path(tempfile.mkdtemp(prefix="mlx-agent-home-"))  # under /tmp: the other user can reach it
    serve = home / "receipts" / "serve"
    serve.mkdir(parents=True)
    for directory in (home, home / "receipts", serve):
        os.chown(directory, attacker.pw_uid, attacker.pw_gid)
        directory.chmod(0o700)
    serve.chmod(0o300)  # the owner may enter and write, not list
    launcher = Path(__file__).resolve().parents[2] / "scripts" / "mlx-agent"
    code = (
        f"import os, runpy, sys; os.environ['MLX_AGENT_HOME'] = {str(home)!r}; "
        f"sys.argv = ['mlx-agent', 'serve', 'status', '--json']; runpy.run_path({str(launcher)!r}, run_name='__main__')"
    )
    try:
        result = as_user(attacker, code)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    doc = json.loads(result.stdout)
    assert (result.returncode, doc["error"]["code"]) == (1, "state_dir_unsafe"), result.stdout + result.stderr
    assert "cannot be listed" in doc["error"]["message"]


def test_another_users_process_is_never_ours_to_stop(agent: Agent, attacker: pwd.struct_passwd) -> None:
    """Our own receipt naming another user's process (pid, birth time and command line alike) signals nothing."""
    victim = subprocess.Popen(
        ["setpriv", f"--reuid={attacker.pw_uid}", f"--regid={attacker.pw_gid}", "--clear-groups", "sleep", "60"]
    )
    try:
        time.sleep(0.3)
        plant_receipt(agent, victim.pid, version="1.0")
        stop = agent.run("serve", "stop", "--port", "9")
        assert stop.code == "ownership_mismatch", stop.stdout
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_links_planted_at_state_files_are_refused(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A link at the log or lock path is refused (the target is untouched); a receipt that is a link is unsafe."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="quick-server")
    port = free_port()
    args = start_args(tiny_model, exe, port)
    preview_hash = agent.preview_hash(*args)
    agent.serve_dir.mkdir(parents=True, mode=0o700)
    (agent.serve_dir / f"{port}.log").symlink_to(victim)
    result = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert result.code == "state_dir_unsafe", result.stdout
    assert victim.read_text() == "precious\n" and (victim.stat().st_mode & 0o777) == 0o644
    (agent.serve_dir / f"{port}.log").unlink()
    (agent.serve_dir / f"{port}.lock").unlink(missing_ok=True)
    (agent.serve_dir / f"{port}.lock").symlink_to(tmp_path / "dangling")
    assert agent.run("serve", "stop", "--port", str(port)).code == "state_dir_unsafe"
    assert not (tmp_path / "dangling").exists()  # the link's target was not created


def test_state_directories_are_private_whatever_the_umask(tmp_path: Path, tiny_model: Path) -> None:
    """Under umask 000 the home, receipts and previews directories are still created 0700."""
    home = tmp_path / "fresh-home"
    env = {**os.environ, "MLX_AGENT_HOME": str(home)}
    launcher = Path(__file__).resolve().parents[2] / "scripts" / "mlx-agent"
    command = f"umask 000; {sys.executable} {launcher} serve start --path {tiny_model} --port {free_port()} --json"
    subprocess.run(["bash", "-c", command], env=env, capture_output=True, check=True, timeout=120)
    for directory in (home, home / "previews"):
        assert directory.is_dir() and (directory.stat().st_mode & 0o777) == 0o700, directory


def _edit_in_place(path: Path) -> None:
    """Change a byte of ``path`` keeping its size, inode and mtime (what a careful attacker does)."""
    st = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(st.st_size - 1)
        last = fh.read(1)
        fh.seek(st.st_size - 1)
        fh.write(bytes([last[0] ^ 1]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_weights_edited_in_place_after_preview_are_stale(agent: Agent, model_copy: Path, tmp_path: Path) -> None:
    """Weights changed in place with their mtime restored still make the confirm stale (ctime is bound)."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="quick-server")
    args = start_args(model_copy, exe, free_port())
    preview_hash = agent.preview_hash(*args)
    _edit_in_place(model_copy / "model.safetensors")
    stale = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert stale.code == "preview_stale"
    fields = [c["field"] for c in stale.doc["error"]["details"]["changes"]]
    assert any(f.endswith("[model.safetensors].ctime_ns") for f in fields), fields


def test_every_load_rechecks_the_base_model(agent: Agent, model_copy: Path, tmp_path: Path) -> None:
    """Under JIT, weights changed after confirm are refused at the first load: 503 model_changed, nothing loads."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="quick-server")
    port = free_port()
    agent.launch(*start_args(model_copy, exe, port), "--jit")
    _edit_in_place(model_copy / "model.safetensors")
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 503 and json.loads(refused.value.read())["error"]["code"] == "model_changed"
    model = agent.run("serve", "status").data["servers"][0]["models"][0]
    assert (model["model_state"], model["loads"], model["last_error"]["code"]) == ("failed", 0, "model_changed")
    assert model["last_error"]["details"]["changed"] == [{"name": "model.safetensors", "reason": "changed"}]


def test_verify_weights_binds_every_byte_and_shows_its_progress(agent: Agent, model_copy: Path) -> None:
    """--verify-weights binds each weight's full sha256 (another hash than without), with a progress bar."""
    args = ["--path", str(model_copy), "--port", str(free_port())]
    plain = agent.run("serve", "start", *args).data["plan"]
    verified = agent.run("serve", "start", *args, "--verify-weights").data["plan"]
    weight = next(f for f in verified["models"][0]["source"]["files"] if f["name"] == "model.safetensors")
    with open(model_copy / "model.safetensors", "rb") as fh:
        assert weight["sha256"] == hashlib.file_digest(fh, "sha256").hexdigest()
    assert plain["preview_hash"] != verified["preview_hash"]
    human = agent.run("serve", "start", *args, "--verify-weights", check_json=False)
    assert human.rc == 0 and "hashing weights" in human.stderr and "sha256 of every byte" in human.stdout


def fill(directory: Path) -> None:
    """Write zeros into ``directory`` until its file system refuses more."""
    with contextlib.suppress(OSError), open(directory / "filler", "wb", buffering=0) as fh:
        while True:
            fh.write(b"\0" * 65536)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """Return a receipts directory on a tiny tmpfs that is already full."""
    with small_disk(tmp_path, "256k") as receipts:
        fill(receipts.parent)
        yield receipts


def test_a_full_disk_is_an_envelope_and_leaves_nothing_running(
    agent: Agent, tiny_model: Path, tmp_path: Path, full_disk: Path
) -> None:
    """With the receipts on a full disk, confirm is state_write_failed (an envelope, no traceback), nothing runs."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="full-disk-server")
    args = [*start_args(tiny_model, exe, free_port()), "--receipts-dir", str(full_disk)]
    preview_hash = agent.preview_hash(*args)
    result = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert (result.rc, result.code) == (1, "state_write_failed"), result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    time.sleep(0.5)
    assert not any("full-disk-server" in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))


@pytest.mark.parametrize("size", ["512k", "3m"])
def test_a_home_under_its_floor_starts_degraded_with_a_warning_not_a_timeout(
    agent: Agent, tiny_model: Path, tmp_path: Path, size: str
) -> None:
    """A disk smaller than its 8 MiB floor: preview and confirm warn (path, free bytes, floor); it runs degraded."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="small-home-server")
    with small_disk(tmp_path, size) as receipts:
        port = free_port()
        args = [*start_args(tiny_model, exe, port), "--receipts-dir", str(receipts), "--ready-timeout", "60"]
        preview = agent.run("serve", "start", *args)
        assert preview.rc == 0, preview.stdout + preview.stderr
        [warning] = [w for w in preview.doc["warnings"] if w.startswith("disk_full")]
        assert warning.startswith(f"disk_full: {receipts / 'serve'} has ")
        assert f"under its floor of {disk.FLOOR_MIN_BYTES} bytes" in warning
        plan_hash = preview.data["plan"]["preview_hash"]
        confirm = agent.run("serve", "start", *args, "--confirm", "--preview-hash", plan_hash)
        try:
            assert (confirm.rc, confirm.code) == (0, None), confirm.stdout + confirm.stderr
            assert [w for w in confirm.doc["warnings"] if w.startswith("disk_full")]
            server = agent.run("serve", "status", "--receipts-dir", str(receipts)).data["servers"][0]
            assert (server["health"], [p["code"] for p in server["problems"]]) == ("degraded", ["disk_full"])
        finally:
            agent.run("serve", "stop", "--port", str(port), "--receipts-dir", str(receipts))


def test_status_says_when_the_disk_a_server_writes_to_is_full(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A running server whose receipts and logs disk fills up is reported degraded with disk_full, not ok."""
    exe = fake_runtime(tmp_path, FAKE_SERVER, name="filling-server")
    with small_disk(tmp_path, "24m") as receipts:
        args = [*start_args(tiny_model, exe, free_port()), "--receipts-dir", str(receipts)]
        receipt = agent.launch(*args)
        try:
            before = agent.run("serve", "status", "--receipts-dir", str(receipts)).data["servers"][0]
            assert (before["health"], before["problems"]) == ("ok", [])
            fill(receipts.parent)
            after = agent.run("serve", "status", "--receipts-dir", str(receipts)).data["servers"][0]
            assert after["health"] == "degraded"
            assert [p["code"] for p in after["problems"]] == ["disk_full"]
            human = agent.run("serve", "status", "--receipts-dir", str(receipts), check_json=False)
            assert "disk_full" in human.stdout
        finally:
            agent.run("serve", "stop", "--port", str(receipt["port"]), "--receipts-dir", str(receipts))
