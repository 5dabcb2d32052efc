"""Adapters bound by content: directory checks, identity, server-side recheck, status fields."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mlx_agent.errors.commands import AdapterInvalid, UnsupportedRuntime
from mlx_agent.files import changed_files
from mlx_agent.plan.adapter import resolve_adapter, verify
from mlx_agent.plan.requests import ServeRequest
from mlx_agent.plan.serve_plan import build_serve_plan
from mlx_agent.records.receipt import OlderReceipt
from mlx_agent.supervise.servers import adapter_fields
from mlx_agent.worker_contract import split_worker_argv
from tests.adapter_support import CONFIG, make_adapter
from tests.conftest import assert_valid


@pytest.mark.fast
def test_adapter_binds_both_files_by_content(tmp_path: Path) -> None:
    """A valid adapter is bound by the sha256 and size of its config and weights."""
    record = resolve_adapter(str(make_adapter(tmp_path / "a")))
    assert record["path"] == str(tmp_path / "a")
    assert [f["name"] for f in record["files"]] == ["adapter_config.json", "adapters.safetensors"]
    assert all(len(f["sha256"]) == 64 and f["size"] > 0 for f in record["files"])


def test_plan_passes_adapter_and_its_expected_hashes(tiny_model: Path, tmp_path: Path) -> None:
    """The wrapped server gets --adapter-path and its contract one recheck per file; the plan validates."""
    adapter = make_adapter(tmp_path / "a")
    plan = build_serve_plan(ServeRequest(path=str(tiny_model), port=18990, adapter_path=str(adapter)))
    assert_valid("serve_plan", {**plan, "preview_hash": "0" * 64})
    argv = plan["models"][0]["worker"]["argv"]
    assert argv[argv.index("--adapter-path") + 1] == str(adapter)
    given, rest = split_worker_argv(argv[4:])
    assert [Path(c.path).name for c in given.contract.file_checks] == ["adapter_config.json", "adapters.safetensors"]
    assert "--adapter-path" in rest


@pytest.mark.fast
@pytest.mark.parametrize("how", ["dir_symlink", "under_symlink", "file_symlink"])
def test_symlinks_are_refused(tmp_path: Path, how: str) -> None:
    """A symlinked adapter directory, one under a symlink, or a symlinked file is adapter_invalid."""
    real = make_adapter(tmp_path / "real" / "adapter")
    if how == "dir_symlink":
        (tmp_path / "link").symlink_to(real)
        target = tmp_path / "link"
    elif how == "under_symlink":
        (tmp_path / "parent").symlink_to(tmp_path / "real")
        target = tmp_path / "parent" / "adapter"
    else:
        (tmp_path / "weights.safetensors").write_bytes((real / "adapters.safetensors").read_bytes())
        (real / "adapters.safetensors").unlink()
        (real / "adapters.safetensors").symlink_to(tmp_path / "weights.safetensors")
        target = real
    with pytest.raises(AdapterInvalid, match="symbolic link"):
        resolve_adapter(str(target))


@pytest.mark.fast
@pytest.mark.parametrize(
    "breakage",
    [
        "no_config",
        "no_weights",
        "config_not_json",
        "no_num_layers",
        "bad_fine_tune_type",
        "foreign_tensor",
        "corrupt_weights",
    ],
)
def test_invalid_adapters_are_refused(tmp_path: Path, breakage: str) -> None:
    """Each way an adapter can be unusable by mlx_lm is adapter_invalid."""
    adapter = make_adapter(tmp_path / "a")
    if breakage == "no_config":
        (adapter / "adapter_config.json").unlink()
    elif breakage == "no_weights":
        (adapter / "adapters.safetensors").unlink()
    elif breakage == "config_not_json":
        (adapter / "adapter_config.json").write_text("{")
    elif breakage == "no_num_layers":
        (adapter / "adapter_config.json").write_text(json.dumps({**CONFIG, "num_layers": None}))
    elif breakage == "bad_fine_tune_type":
        (adapter / "adapter_config.json").write_text(json.dumps({**CONFIG, "fine_tune_type": "full"}))
    elif breakage == "foreign_tensor":
        make_adapter(adapter, keys=("model.layers.0.self_attn.q_proj.lora_a", "model.embed_tokens.weight"))
    else:
        (adapter / "adapters.safetensors").write_bytes(b"\x01")
    with pytest.raises(AdapterInvalid):
        resolve_adapter(str(adapter))


def test_an_mlx_lm_adapter_on_mlx_vlm_is_adapter_invalid(tiny_model: Path, tmp_path: Path) -> None:
    """mlx-vlm would ignore mlx_lm adapter keys, so mlx_lm's layout there is adapter_invalid (it names no keys)."""
    with pytest.raises(AdapterInvalid, match="keys"):
        build_serve_plan(
            ServeRequest(path=str(tiny_model), runtime="mlx-vlm", adapter_path=str(make_adapter(tmp_path / "a")))
        )


def test_adapter_with_a_foreign_executable_is_unsupported(tiny_model: Path, tmp_path: Path) -> None:
    """Only our entry rechecks adapters before loading, so a native executable cannot serve one."""
    exe = tmp_path / "mlx_lm.server"
    exe.write_text(f"#!{sys.executable}\n")
    exe.chmod(0o755)
    with pytest.raises(UnsupportedRuntime, match="entry"):
        build_serve_plan(
            ServeRequest(
                path=str(tiny_model), runtime_executable=str(exe), adapter_path=str(make_adapter(tmp_path / "a"))
            )
        )


@pytest.mark.fast
def test_server_side_recheck_finds_a_changed_byte(tmp_path: Path) -> None:
    """The entry's recheck reports a file whose content changed at the same size, and a missing one."""
    adapter = make_adapter(tmp_path / "a")
    record = resolve_adapter(str(adapter))
    expected = [(adapter / f["name"], f["sha256"], f["size"]) for f in record["files"]]
    assert changed_files(expected) == []
    weights = adapter / "adapters.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    changed = changed_files(expected)
    assert [c["path"] for c in changed] == [str(weights)]
    (adapter / "adapter_config.json").unlink()
    assert len(changed_files(expected)) == 2


@pytest.mark.fast
def test_status_fields_bound_unknown_and_verified(tmp_path: Path) -> None:
    """Plain status says bound; an old receipt naming an adapter without identity says unknown; verify re-hashes."""
    adapter = make_adapter(tmp_path / "a")
    record = resolve_adapter(str(adapter))
    assert adapter_fields({"adapter": record}, verify=False)["adapter_status"] == "bound"
    assert adapter_fields({"adapter": record}, verify=True)["adapter_status"] == "verified"
    assert verify(record) == "verified"
    old: OlderReceipt = {"argv": ["python", "-m", "mlx_lm.server", "--adapter-path", "/old/adapter"]}
    assert adapter_fields(old, verify=True) == {"adapter_path": "/old/adapter", "adapter_status": "unknown"}
    (adapter / "adapter_config.json").write_text(json.dumps({**CONFIG, "num_layers": 3}))
    assert adapter_fields({"adapter": record}, verify=True)["adapter_status"] == "changed"
    (adapter / "adapter_config.json").unlink()
    assert adapter_fields({"adapter": record}, verify=True)["adapter_status"] == "missing"
    assert adapter_fields({"argv": []}, verify=False) == {"adapter_path": None, "adapter_status": None}


@pytest.mark.fast
def test_a_refusal_in_the_log_becomes_its_error_code(tmp_path: Path) -> None:
    """When our entry exits with an mlx-agent-error line, confirm reports that code, not launch_failed."""
    from mlx_agent.errors import AdapterChanged, LaunchFailed
    from mlx_agent.supervise.readiness import launch_failed

    log = tmp_path / "server.log"
    log.write_text(
        'loading\nmlx-agent-error {"code": "adapter_changed", "message": "changed", '
        '"details": {"files": [{"path": "/a"}]}}\n'
    )
    error = launch_failed(3, log)
    assert isinstance(error, AdapterChanged) and error.details["files"] == [{"path": "/a"}]
    log.write_text("Traceback ...\nValueError: boom\n")
    assert type(launch_failed(1, log)) is LaunchFailed
