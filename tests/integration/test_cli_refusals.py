"""Each bad input to `serve start|status|stop` gets its own error code, through the real CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.conftest import Agent, assert_valid, free_port
from tests.fixtures.tiny_model import build_hf_cache_repo


@pytest.mark.parametrize("port", ["0", "70000"])
def test_port_out_of_range_is_a_usage_error(agent: Agent, tiny_model: Path, port: str) -> None:
    """Ports 0 and 70000 exit 2 with invalid_arguments in the envelope."""
    result = agent.run("serve", "start", "--path", str(tiny_model), "--port", port)
    assert (result.rc, result.code) == (2, "invalid_arguments")


def test_nonexistent_path(agent: Agent, tmp_path: Path) -> None:
    """A model path that does not exist is model_not_local."""
    result = agent.run("serve", "start", "--path", str(tmp_path / "missing"))
    assert (result.rc, result.code) == (1, "model_not_local")
    assert result.doc["error"]["remediation"]


def test_directory_without_config(agent: Agent, tmp_path: Path) -> None:
    """A directory without config.json is config_missing."""
    result = agent.run("serve", "start", "--path", str(tmp_path))
    assert (result.rc, result.code) == (1, "config_missing")


def test_repo_not_in_cache(agent: Agent) -> None:
    """A repo absent from the HF cache is model_not_local; nothing is downloaded."""
    result = agent.run("serve", "start", "--repo", "org/absent")
    assert (result.rc, result.code) == (1, "model_not_local")


def test_incomplete_snapshot(agent: Agent, tiny_model: Path) -> None:
    """A cached snapshot without its weights is model_not_local."""
    build_hf_cache_repo(Path(agent.env["HF_HOME"]), "org/partial", tiny_model, complete=False)
    result = agent.run("serve", "start", "--repo", "org/partial")
    assert (result.rc, result.code) == (1, "model_not_local")


def test_missing_runtime_executable(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A runtime executable that does not exist is runtime_not_installed."""
    result = agent.run(
        "serve", "start", "--path", str(tiny_model), "--runtime-executable", str(tmp_path / "bin" / "mlx_lm.server")
    )
    assert (result.rc, result.code) == (1, "runtime_not_installed")


def test_confirm_without_hash(agent: Agent, tiny_model: Path) -> None:
    """--confirm without --preview-hash is preview_hash_required and starts nothing."""
    result = agent.run("serve", "start", "--path", str(tiny_model), "--port", str(free_port()), "--confirm")
    assert (result.rc, result.code) == (1, "preview_hash_required")
    assert not list(agent.serve_dir.glob("*.json")) if agent.serve_dir.exists() else True


def test_stale_hash_after_changed_argument_lists_the_changes(agent: Agent, tiny_model: Path) -> None:
    """Confirming with a different --max-tokens is preview_stale and names each changed field."""
    port = str(free_port())
    preview_hash = agent.preview_hash("--path", str(tiny_model), "--port", port, "--max-tokens", "32")
    result = agent.run(
        "serve",
        "start",
        "--path",
        str(tiny_model),
        "--port",
        port,
        "--max-tokens",
        "64",
        "--confirm",
        "--preview-hash",
        preview_hash,
    )
    assert (result.rc, result.code) == (1, "preview_stale")
    changes = {c["field"]: (c["old"], c["new"]) for c in result.doc["error"]["details"]["changes"]}
    name = tiny_model.name
    assert changes[f"models[{name}].max_tokens"] == (32, 64)
    assert set(changes) == {f"models[{name}].max_tokens", f"models[{name}].worker.argv"}


def test_stale_hash_after_changed_model_file(agent: Agent, model_copy: Path) -> None:
    """Editing a model file between preview and confirm is preview_stale naming that file."""
    port = str(free_port())
    preview_hash = agent.preview_hash("--path", str(model_copy), "--port", port)
    config = json.loads((model_copy / "config.json").read_text())
    (model_copy / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    result = agent.run(
        "serve", "start", "--path", str(model_copy), "--port", port, "--confirm", "--preview-hash", preview_hash
    )
    assert result.code == "preview_stale"
    fields = [c["field"] for c in result.doc["error"]["details"]["changes"]]
    assert fields == [
        f"models[{model_copy.name}].source.files[config.json].sha256",
        f"models[{model_copy.name}].source.files[config.json].size",
    ]


def test_unknown_hash_is_stale_without_changes(agent: Agent, tiny_model: Path) -> None:
    """A hash that was never previewed here is preview_stale and says the changes cannot be listed."""
    result = agent.run(
        "serve", "start", "--path", str(tiny_model), "--port", str(free_port()), "--confirm", "--preview-hash", "0" * 64
    )
    assert result.code == "preview_stale"
    assert result.doc["error"]["details"]["changes"] is None


def test_port_bound_by_another_program(agent: Agent, tiny_model: Path) -> None:
    """A port some other program listens on is port_in_use at preview."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = str(sock.getsockname()[1])
        result = agent.run("serve", "start", "--path", str(tiny_model), "--port", port)
    assert (result.rc, result.code) == (1, "port_in_use")


def test_port_claimed_by_wired_config(agent: Agent, tiny_model: Path) -> None:
    """A wired config expecting another model on the port is port_claimed; another port is fine."""
    port = free_port()
    wired = agent.home / "wired"
    wired.mkdir()
    (wired / "editor.json").write_text(
        json.dumps({"base_url": f"http://127.0.0.1:{port}/v1", "runtime": "mlx_lm", "model": "org/other-model"})
    )
    result = agent.run("serve", "start", "--path", str(tiny_model), "--port", str(port))
    assert (result.rc, result.code) == (1, "port_claimed")
    assert result.doc["error"]["details"]["claims"][0]["model"] == "org/other-model"
    assert agent.run("serve", "start", "--path", str(tiny_model), "--port", str(free_port())).rc == 0


def test_wired_config_for_the_same_server_does_not_claim(agent: Agent, tiny_model: Path) -> None:
    """A wired config that expects exactly this model and runtime leaves the port usable."""
    port = free_port()
    (agent.home / "wired").mkdir()
    (agent.home / "wired" / "same.json").write_text(
        json.dumps({"base_url": f"http://localhost:{port}/v1", "runtime": "mlx_lm", "model": str(tiny_model)})
    )
    assert agent.run("serve", "start", "--path", str(tiny_model), "--port", str(port)).rc == 0


def test_stop_without_receipt(agent: Agent) -> None:
    """Stopping a port with no receipt is receipt_not_found."""
    result = agent.run("serve", "stop", "--port", str(free_port()))
    assert (result.rc, result.code) == (1, "receipt_not_found")


def test_corrupt_receipt(agent: Agent, tiny_model: Path) -> None:
    """A corrupt receipt is listed as unreadable by status, refused by stop, and blocks confirm's port."""
    port = free_port()
    agent.serve_dir.mkdir(parents=True)
    (agent.serve_dir / f"{port}.json").write_text("{half a receipt")
    status = agent.run("serve", "status")
    assert status.rc == 0
    assert status.data["servers"][0]["state"] == "unreadable"
    stop = agent.run("serve", "stop", "--port", str(port))
    assert (stop.rc, stop.code) == (1, "receipt_corrupt")
    preview = agent.run("serve", "start", "--path", str(tiny_model), "--port", str(port))
    assert preview.code == "receipt_corrupt"
    assert (agent.serve_dir / f"{port}.json").exists()


def forge_receipt(agent: Agent, port: int, pid: int, create_time: float, argv: list[str]) -> Path:
    """Write a receipt by hand, as if an earlier confirm had launched ``pid``."""
    agent.serve_dir.mkdir(parents=True, exist_ok=True)
    path = agent.serve_dir / f"{port}.json"
    path.write_text(
        json.dumps(
            {
                "format_version": "1.0",
                "kind": "serve",
                "port": port,
                "pid": pid,
                "pgid": pid,
                "create_time": create_time,
                "argv": argv,
                "host": "127.0.0.1",
                "base_url": f"http://127.0.0.1:{port}",
                "runtime": "mlx_lm",
                "model": "/models/x",
                "log_path": str(agent.serve_dir / f"{port}.log"),
                "started_at": "2026-01-01T00:00:00+00:00",
                "ready_at": "2026-01-01T00:00:01+00:00",
                "preview_hash": "0" * 64,
            }
        )
    )
    return path


def test_stop_refuses_a_foreign_process(agent: Agent) -> None:
    """A receipt whose pid now runs another program: ownership_mismatch, nothing signalled, receipt kept."""
    foreign = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        port = free_port()
        ours = [os.path.realpath("/usr/bin/python3"), "-m", "mlx_agent.runtime", "mlx_lm"]
        path = forge_receipt(agent, port, foreign.pid, psutil.Process(foreign.pid).create_time(), ours)
        assert agent.run("serve", "status").data["servers"][0]["state"] == "foreign"
        result = agent.run("serve", "stop", "--port", str(port))
        assert (result.rc, result.code) == (1, "ownership_mismatch")
        assert foreign.poll() is None and path.exists()
        # Same argv but a different birth time is a reused pid too.
        forge_receipt(agent, port, foreign.pid, psutil.Process(foreign.pid).create_time() - 5, ["sleep", "300"])
        assert agent.run("serve", "stop", "--port", str(port)).code == "ownership_mismatch"
        assert foreign.poll() is None
        path.unlink()
    finally:
        foreign.kill()
        foreign.wait()


def test_stop_of_an_exited_process_is_already_stopped(agent: Agent) -> None:
    """A receipt whose process has exited: stop succeeds with already_stopped and removes the receipt."""
    gone = subprocess.Popen(["true"])
    create_time = psutil.Process(gone.pid).create_time()
    gone.wait()
    port = free_port()
    path = forge_receipt(agent, port, gone.pid, create_time, ["true"])
    assert agent.run("serve", "status").data["servers"][0]["state"] == "exited"
    result = agent.run("serve", "stop", "--port", str(port))
    assert (result.rc, result.data["result"]) == (0, "already_stopped")
    assert not path.exists()


def test_status_envelope_validates_with_no_receipts(agent: Agent) -> None:
    """Status with nothing started is an ok envelope with an empty list."""
    result = agent.run("serve", "status")
    assert (result.rc, result.data["servers"]) == (0, [])
    assert_valid("envelope", result.doc)


def test_status_lists_wired_claims(agent: Agent) -> None:
    """Status lists every loopback port a wired config claims, with what it expects there."""
    wired = agent.home / "wired"
    wired.mkdir()
    (wired / "editor.json").write_text(
        json.dumps({"base_url": "http://127.0.0.1:8090/v1", "runtime": "mlx_lm", "model": "org/m"})
    )
    (wired / "broken.json").write_text("{")
    result = agent.run("serve", "status")
    assert result.data["claims"] == [
        {
            "port": 8090,
            "file": str(wired / "editor.json"),
            "base_url": "http://127.0.0.1:8090/v1",
            "runtime": "mlx_lm",
            "model": "org/m",
        }
    ]
    assert any("broken.json" in w for w in result.doc["warnings"])
    assert agent.run("serve", "status", "--port", "9999").data["claims"] == []


def test_vision_config_forced_onto_mlx_lm(agent: Agent, model_copy: Path) -> None:
    """A vision config served with --runtime mlx_lm is refused with runtime_model_mismatch."""
    config = json.loads((model_copy / "config.json").read_text())
    (model_copy / "config.json").write_text(json.dumps({**config, "vision_config": {"depth": 1}}))
    result = agent.run("serve", "start", "--path", str(model_copy), "--runtime", "mlx_lm")
    assert (result.rc, result.code) == (1, "runtime_model_mismatch")


def test_unknown_model_type(agent: Agent, model_copy: Path) -> None:
    """A model_type no runtime supports is unsupported_model at preview, under auto or not."""
    config = json.loads((model_copy / "config.json").read_text())
    (model_copy / "config.json").write_text(json.dumps({**config, "model_type": "no_such_arch"}))
    for runtime in ("auto", "mlx_lm"):
        result = agent.run("serve", "start", "--path", str(model_copy), "--runtime", runtime)
        assert (result.rc, result.code) == (1, "unsupported_model")
