"""Runtime selection (`--runtime auto` and explicit choices), isolated executables, and --thinking."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.canonical import plan_diff, with_hash
from mlx_agent.errors import InvalidArguments, UnsupportedModel
from mlx_agent.errors.commands import RuntimeModelMismatch, RuntimeNotInstalled, RuntimeSymlinkLoop, UnsupportedRuntime
from mlx_agent.plan.requests import ServeRequest
from mlx_agent.plan.runtime import NATIVE_ENTRY
from mlx_agent.plan.runtime_select import select_runtime
from mlx_agent.plan.serve_plan import build_serve_plan
from mlx_agent.records.plan import ModelPlan
from mlx_agent.runtime.entries.native_entry import PORT_ENV
from tests.conftest import assert_valid

VISION = {"model_type": "qwen2_vl", "vision_config": {"depth": 2}, "image_token_id": 5}


def plan(model: Path, **kw: object) -> Any:
    """Return the (only) model of the hashed, schema-checked plan for ``model``, with the front's port."""
    result = with_hash(build_serve_plan(ServeRequest(path=str(model), **{"port": 18998, **kw})))
    assert_valid("serve_plan", result)
    served: ModelPlan = result["models"][0]
    return {**served, "port": result["port"], "argv": served["worker"]["argv"]}


def set_config(model: Path, **changes: object) -> None:
    """Rewrite the model's config.json with ``changes`` applied (None deletes a key)."""
    config = json.loads((model / "config.json").read_text())
    config.update(changes)
    (model / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))


def test_auto_picks_mlx_lm_for_a_text_model_and_says_why(tiny_model: Path) -> None:
    """Auto on a llama config resolves to mlx_lm (port 8080) and records the reason."""
    result = plan(tiny_model, runtime="auto", port=None)
    assert (result["runtime"]["name"], result["port"]) == ("mlx_lm", 8080)
    assert result["requested_runtime"] == "auto"
    assert "text model" in str(result["runtime_reason"]) and "llama" in str(result["runtime_reason"])


def test_auto_picks_mlx_vlm_for_vision_markers() -> None:
    """A config with a vision_config resolves to mlx-vlm."""
    name, reason = select_runtime("auto", VISION, None)
    assert name == "mlx-vlm"
    assert "vision_config" in reason


def test_auto_falls_back_to_mlx_vlm_for_types_only_it_has() -> None:
    """A text model_type that mlx_lm lacks but mlx_vlm ships goes to mlx-vlm."""
    name, _ = select_runtime("auto", {"model_type": "florence2"}, None)
    assert name == "mlx-vlm"


def test_auto_applies_mlx_lm_remapping() -> None:
    """mlx_lm's own remapping counts: mistral loads as llama."""
    name, reason = select_runtime("auto", {"model_type": "mistral"}, None)
    assert name == "mlx_lm" and reason.endswith("as llama")


def test_unknown_model_type_is_unsupported_model() -> None:
    """A model_type nobody supports is unsupported_model naming it."""
    with pytest.raises(UnsupportedModel, match="no_such_arch"):
        select_runtime("auto", {"model_type": "no_such_arch"}, None)
    with pytest.raises(UnsupportedModel):
        select_runtime("auto", {}, None)


@pytest.mark.fast
def test_vision_model_forced_onto_mlx_lm_is_refused() -> None:
    """--runtime mlx_lm on a vision config is runtime_model_mismatch."""
    with pytest.raises(RuntimeModelMismatch, match="vision"):
        select_runtime("mlx_lm", VISION, None)


def test_explicit_mlx_vlm_runs_its_server_on_a_private_socket_on_8083(tiny_model: Path) -> None:
    """mlx-vlm runs mlx_vlm's server through our entry on the front's socket (no host or port), front on 8083."""
    result = plan(tiny_model, runtime="mlx-vlm", port=None)
    argv = result["argv"]
    assert isinstance(argv, list)
    assert argv[:4] == [sys.executable, "-m", "mlx_agent.runtime", "mlx-vlm"]
    assert "{socket}" in argv and "--host" not in argv and "--port" not in argv
    assert result["port"] == 8083
    assert result["runtime"]["adapter_enabled"] is True  # its own adapters (recipes/mlx-vlm.json adapter_layout)


def test_thinking_off_merges_into_chat_template_args(tiny_model: Path) -> None:
    """--thinking off adds enable_thinking=false to the user's template args for mlx_lm."""
    result = plan(tiny_model, thinking="off", chat_template_args='{"style": "brief"}')
    argv = result["argv"]
    assert isinstance(argv, list)
    assert json.loads(argv[argv.index("--chat-template-args") + 1]) == {"style": "brief", "enable_thinking": False}
    assert result["thinking"] == "off"


def test_thinking_default_adds_nothing(tiny_model: Path) -> None:
    """Without --thinking the template decides and no template args are passed."""
    result = plan(tiny_model)
    assert result["thinking"] == "default" and "--chat-template-args" not in result["argv"]


def test_thinking_on_mlx_vlm_uses_its_flag(tiny_model: Path) -> None:
    """mlx-vlm has its own switch: --thinking on passes --enable-thinking, off passes nothing."""
    assert "--enable-thinking" in plan(tiny_model, runtime="mlx-vlm", thinking="on")["argv"]
    off = plan(tiny_model, runtime="mlx-vlm", thinking="off")
    assert "--enable-thinking" not in off["argv"] and off["thinking"] == "off"


def test_template_args_on_mlx_vlm_are_unsupported(tiny_model: Path) -> None:
    """mlx-vlm takes no chat template args: unsupported_runtime."""
    with pytest.raises(UnsupportedRuntime):
        plan(tiny_model, runtime="mlx-vlm", chat_template_args="{}")


@pytest.mark.parametrize("raw", ["not json", "[1]"])
def test_bad_template_args_are_invalid_arguments(tiny_model: Path, raw: str) -> None:
    """--chat-template-args must be a JSON object."""
    with pytest.raises(InvalidArguments):
        plan(tiny_model, chat_template_args=raw)


def test_symlink_loop_is_runtime_symlink_loop(tiny_model: Path, tmp_path: Path) -> None:
    """A runtime executable that is a symlink loop has its own code."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(RuntimeSymlinkLoop):
        plan(tiny_model, runtime_executable=str(tmp_path / "a"))


def test_env_shebang_is_bound_to_the_interpreter_path_gave_at_preview(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`#!/usr/bin/env python3` is resolved once, and the argv launches that interpreter explicitly."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    exe = tmp_path / "mlx_lm.server"
    exe.write_text("#!/usr/bin/env python3\nprint('server')\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    result = plan(tiny_model, runtime_executable=str(exe))
    assert result["argv"][:3] == [str(bindir / "python3"), str(NATIVE_ENTRY), str(exe)]
    runtime = result["runtime"]
    assert isinstance(runtime, dict)
    assert runtime["versions"]["mlx-lm"]


def test_runtime_executable_with_auto_is_invalid(tiny_model: Path) -> None:
    """An isolated executable must say which runtime it provides."""
    with pytest.raises(InvalidArguments):
        plan(tiny_model, runtime="auto", runtime_executable=sys.executable)


def test_configured_executable_is_bound(tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An executable configured in $MLX_AGENT_HOME/runtimes.json is used and bound like --runtime-executable."""
    exe = tmp_path / "mlx_vlm.server"
    exe.write_text(f"#!{sys.executable}\n")
    exe.chmod(0o755)
    monkeypatch.setenv("MLX_AGENT_HOME", str(tmp_path))
    (tmp_path / "runtimes.json").write_text(json.dumps({"mlx-vlm": {"executable": str(exe)}}))
    first = plan(tiny_model, runtime="mlx-vlm")
    runtime = first["runtime"]
    assert isinstance(runtime, dict)
    assert (runtime["launcher"], runtime["executable_from"]) == ("native", "runtimes.json")
    exe.write_text(f"#!{sys.executable}\n# changed\n")
    assert (first["worker"]["secret_env"], first["worker"]["port_env"]) == ("MLX_VLM_SERVER_API_KEY", PORT_ENV)
    changed = [c["field"] for c in plan_diff(first, plan(tiny_model, runtime="mlx-vlm"))]
    assert changed == ["runtime.executable_sha256", "runtime_checks"]  # bound, and rechecked at every load
    (tmp_path / "runtimes.json").write_text("{broken")
    with pytest.raises(RuntimeNotInstalled):
        plan(tiny_model, runtime="mlx-vlm")


@pytest.mark.parametrize("package", ["mlx_lm", "mlx_vlm"])
def test_remapping_read_without_parsing_the_module_matches_a_full_parse(package: str) -> None:
    """The one-statement reading of MODEL_REMAPPING gives what parsing the whole installed module gives."""
    import ast

    from mlx_agent.installed import model_support, package_dir

    root = package_dir(package, None)
    assert root is not None
    tree = ast.parse((root / "utils.py").read_text())
    full = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "MODEL_REMAPPING" for t in node.targets)
    )
    support = model_support(package, None)
    assert support is not None and support[1] == full
