"""The serve plan: deterministic, complete, and sensitive to everything that decides what runs."""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from pathlib import Path

import pytest

from mlx_agent.canonical import canonical_json, plan_diff
from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import RuntimeNotExecutable, RuntimeNotInstalled, UnsupportedRuntime
from mlx_agent.plan.requests import ServeRequest
from mlx_agent.plan.runtime import NATIVE_ENTRY
from mlx_agent.plan.serve_plan import build_serve_plan
from mlx_agent.runtime.entries.native_entry import KEY_ENV, PORT_ENV
from mlx_agent.worker_contract import split_worker_argv
from tests.conftest import assert_valid
from tests.contract_support import contract
from tests.plan_support import plan_for


def test_plan_is_deterministic_and_valid(tiny_model: Path) -> None:
    """Two builds of the same request give the same bytes, and the plan matches its schema."""
    first, second = plan_for(tiny_model), plan_for(tiny_model)
    assert canonical_json(first) == canonical_json(second)
    assert_valid("serve_plan", first)


def test_plan_binds_what_decides_the_launch(tiny_model: Path) -> None:
    """The plan names the absolute interpreter, versions, loopback host, argv and offline environment."""
    plan = plan_for(tiny_model, max_tokens=64)
    model = plan["models"][0]
    runtime = model["runtime"]
    assert runtime.get("interpreter") == str(Path(sys.executable).absolute())
    versions = runtime.get("versions") or {}
    assert versions["mlx-lm"] and versions["mlx"]
    window = model["context_window"]
    assert window is not None
    assert model["worker"]["argv"] == [
        sys.executable,
        "-m",
        "mlx_agent.runtime",
        "mlx_lm",
        "--model",
        str(tiny_model),
        "--max-tokens",
        "64",
        "--mlx-agent-socket",
        "{socket}",
        "--mlx-agent-prompt-cache",
        "{prompt_cache}",
        *contract(
            context_window=window,
            prompt_cache_disk_gb=4.0,
            **{field: plan["front"][field] for field in ("max_body_bytes", "header_timeout", "body_timeout")},
        ),
    ]
    assert model["worker"]["transport"] == "unix" and model["served_model_name"] == tiny_model.name
    assert plan["argv"] == [sys.executable, "-m", "mlx_agent.gateway", "--config", plan["front"]["config_path"]]
    for env in (plan["env"], model["worker"]["env"]):
        assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert (plan["host"], plan["port"], plan["front"]["mode"]) == ("127.0.0.1", 18999, "eager")
    assert model["policy"] == {"idle_timeout": 0, "keep_loaded": True, "preload": True}
    assert set(plan) == {
        "format_version",
        "operation",
        "supervisor",
        "host",
        "port",
        "base_url",
        "front",
        "models",
        "argv",
        "env",
        "cwd",
        "readiness",
        "ready_timeout",
        "preview_hash",
    }


def test_default_port_comes_from_the_recipe(tiny_model: Path) -> None:
    """Without --port, mlx_lm plans port 8080."""
    assert build_serve_plan(ServeRequest(path=str(tiny_model)))["port"] == 8080


def test_changed_small_file_changes_the_hash(model_copy: Path) -> None:
    """Editing the chat template or config changes the plan, and the diff names the file."""
    before = plan_for(model_copy)
    with open(model_copy / "tokenizer_config.json", "a") as fh:
        fh.write(" ")
    after = plan_for(model_copy)
    assert before["preview_hash"] != after["preview_hash"]
    fields = [c["field"] for c in plan_diff(before, after)]
    assert f"models[{model_copy.name}].source.files[tokenizer_config.json].sha256" in fields


def test_touched_weight_file_changes_the_hash(model_copy: Path) -> None:
    """A weight file rewritten in place (new mtime) changes the plan without being read in full."""
    before = plan_for(model_copy)
    weights = model_copy / "model.safetensors"
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    after = plan_for(model_copy)
    assert [c["field"] for c in plan_diff(before, after)] == [
        f"models[{model_copy.name}].source.files[model.safetensors].ctime_ns",
        f"models[{model_copy.name}].source.files[model.safetensors].mtime_ns",
    ]


@pytest.mark.parametrize("port", [0, 70000, -1])
def test_port_out_of_range_is_invalid_arguments(tiny_model: Path, port: int) -> None:
    """Ports outside 1-65535 are usage errors."""
    with pytest.raises(InvalidArguments):
        build_serve_plan(ServeRequest(path=str(tiny_model), port=port))


def test_path_and_repo_together_are_invalid_arguments(tiny_model: Path) -> None:
    """Exactly one source must be named."""
    with pytest.raises(InvalidArguments):
        build_serve_plan(ServeRequest(path=str(tiny_model), repo="org/x"))
    with pytest.raises(InvalidArguments):
        build_serve_plan(ServeRequest())


def test_unknown_runtime_is_unsupported(tiny_model: Path) -> None:
    """A runtime without a recipe is unsupported_runtime."""
    with pytest.raises(UnsupportedRuntime):
        build_serve_plan(ServeRequest(path=str(tiny_model), runtime="llama_cpp"))


def test_missing_runtime_executable_is_runtime_not_installed(tiny_model: Path, tmp_path: Path) -> None:
    """A runtime executable that does not exist is runtime_not_installed."""
    with pytest.raises(RuntimeNotInstalled):
        build_serve_plan(ServeRequest(path=str(tiny_model), runtime_executable=str(tmp_path / "mlx_lm.server")))


def test_non_executable_runtime_is_runtime_not_executable(tiny_model: Path, tmp_path: Path) -> None:
    """A runtime file without the execute bit is runtime_not_executable."""
    exe = tmp_path / "mlx_lm.server"
    exe.write_text(f"#!{sys.executable}\n")
    with pytest.raises(RuntimeNotExecutable, match="not an executable"):
        build_serve_plan(ServeRequest(path=str(tiny_model), runtime_executable=str(exe)))


def test_runtime_executable_binds_its_content(tiny_model: Path, tmp_path: Path) -> None:
    """An isolated executable is launched natively and bound by path, interpreter and sha256, rechecked every load."""
    exe = tmp_path / "mlx_lm.server"
    exe.write_text(f"#!{sys.executable}\nprint('server')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    first = plan_for(tiny_model, runtime_executable=str(exe))
    model = first["models"][0]
    runtime = model["runtime"]
    assert runtime.get("launcher") == "native" and runtime.get("adapter_enabled") is False
    assert model["worker"]["argv"][:3] == [sys.executable, str(NATIVE_ENTRY), str(exe)]
    assert model["worker"]["transport"] == "tcp"
    assert str(exe) in {c["path"] for c in model["runtime_checks"]}
    exe.write_text(f"#!{sys.executable}\nprint('changed')\n")
    second = plan_for(tiny_model, runtime_executable=str(exe))
    changed = {c["field"] for c in plan_diff(first, second)}
    assert f"models[{tiny_model.name}].runtime.executable_sha256" in changed
    assert {f.rpartition(".")[2] for f in changed} == {"executable_sha256", "runtime_checks"}


def test_a_native_worker_gets_its_port_and_key_in_its_environment(tiny_model: Path, tmp_path: Path) -> None:
    """A native mlx_lm worker runs under the native entry: no port in its argv, a key the entry checks, both in env."""
    exe = tmp_path / "mlx_lm.server"
    exe.write_text(f"#!{sys.executable}\nprint('server')\n")
    exe.chmod(0o755)
    model = plan_for(tiny_model, runtime_executable=str(exe))["models"][0]
    worker, runtime = model["worker"], model["runtime"]
    assert "{port}" not in worker["argv"] and "--port" not in worker["argv"]
    assert worker["argv"][3:5] == ["--model", str(tiny_model)] and "--host" in worker["argv"]
    assert (worker["port_env"], worker["secret_env"]) == (PORT_ENV, KEY_ENV)
    with open(NATIVE_ENTRY, "rb") as fh:
        assert runtime.get("native_entry_sha256") == hashlib.file_digest(fh, "sha256").hexdigest()
    assert {
        "path": str(NATIVE_ENTRY),
        "sha256": runtime.get("native_entry_sha256"),
        "size": NATIVE_ENTRY.stat().st_size,
    } in model["runtime_checks"]
    loaded = NATIVE_ENTRY.parents[2] / "api_errors.py"  # what the entry loads beside it, bound as it is
    with open(loaded, "rb") as fh:
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    assert {"path": str(loaded), "sha256": digest, "size": loaded.stat().st_size} in model["runtime_checks"]
    wrapped = plan_for(tiny_model)["models"][0]["worker"]
    assert (wrapped["port_env"], wrapped["secret_env"], wrapped["transport"]) == (None, None, "unix")


def test_the_plan_binds_the_interpreter_runtime_and_front_by_content(tiny_model: Path) -> None:
    """The interpreter, mlx_lm's patched modules, our entry and the front's sources are bound by sha256."""
    plan = plan_for(tiny_model)
    runtime = plan["models"][0]["runtime"]
    assert runtime.get("interpreter_sha256") and plan["front"]["interpreter_sha256"]
    sources = runtime.get("runtime_sources") or {}
    assert {"mlx_lm/server.py", "mlx_lm/generate.py"} <= set(sources)
    assert any(name.startswith("mlx_lm/tool_parsers/") for name in sources)
    checked = {Path(c["path"]).name for c in plan["models"][0]["runtime_checks"]}
    assert {"server.py", "generate.py", "generator.py"} <= checked  # the runtime's and our entry's
    assert "gateway/door/app.py" in plan["front"]["sources"] and "bodies.py" in plan["front"]["sources"]


def test_without_max_tokens_nothing_cuts_a_reply_short_of_the_window(tiny_model: Path) -> None:
    """No --max-tokens plans null for the front and the window for the worker; an explicit one is passed as is."""
    from mlx_agent.plan.front import front_config

    plan = plan_for(tiny_model)
    model = plan["models"][0]
    argv = model["worker"]["argv"]
    assert model["max_tokens"] is None and argv[argv.index("--max-tokens") + 1] == str(model["context_window"])
    assert front_config(plan)["models"][0]["max_tokens"] is None
    assert_valid("front_config", front_config(plan))
    ceiling_only = plan_for(tiny_model, max_tokens_ceiling=8)["models"][0]  # checked against a set default only
    assert (ceiling_only["max_tokens"], ceiling_only["max_tokens_ceiling"]) == (None, 8)
    with pytest.raises(InvalidArguments, match="--max-tokens-ceiling"):
        plan_for(tiny_model, max_tokens=16, max_tokens_ceiling=8)


def test_without_a_window_the_worker_keeps_its_own_default(model_copy: Path) -> None:
    """A model whose config names no context window gets no --max-tokens in its worker's argv at all."""
    import json

    config = json.loads((model_copy / "config.json").read_text())
    config.pop("max_position_embeddings", None)
    (model_copy / "config.json").write_text(json.dumps(config))
    model = plan_for(model_copy)["models"][0]
    assert model["context_window"] is None and "--max-tokens" not in model["worker"]["argv"]


def test_the_queue_bound_the_stall_timeout_and_the_worker_slots_reach_the_fronts_config(tiny_model: Path) -> None:
    """--max-queue and --stall-timeout are in the plan and its config; mlx_lm's slots are 32, 1 with --kv-bits."""
    from mlx_agent.plan.front import front_config

    default = plan_for(tiny_model)
    assert (default["front"]["max_queue"], default["front"]["stall_timeout"]) == (64, 120.0)
    assert front_config(default)["models"][0]["worker_slots"] == 32
    plan = plan_for(tiny_model, max_queue=3, stall_timeout=7.5, kv_bits=4)
    config = front_config(plan)
    assert (config["max_queue"], config["stall_timeout"]) == (3, 7.5)
    model = config["models"][0]
    assert (model["worker_slots"], model["kv_cache"]) == (1, {"kv_bits": 4, "kv_group_size": 64})
    assert plan["preview_hash"] != default["preview_hash"]
    assert_valid("front_config", config)


def test_the_reply_limits_are_per_model_options_in_the_plan_and_the_contract(tiny_model: Path) -> None:
    """--hedge-limit and friends land in the model's plan and its worker's contract; the defaults fill the rest."""
    model = plan_for(tiny_model, reasoning_budget=64, hedge_limit=0, limit_answers=True)["models"][0]
    assert model["reply_limits"] == {"reasoning_budget": 64, "hedge_limit": 0, "repeat_limit": 3, "limit_answers": True}
    planned = split_worker_argv(model["worker"]["argv"])[0].contract
    limits = (planned.reasoning_budget, planned.hedge_limit, planned.repeat_limit, planned.limit_answers)
    assert limits == (64, 0, 3, True)
    assert plan_for(tiny_model)["models"][0]["reply_limits"] == {
        "reasoning_budget": 0,
        "hedge_limit": 12,
        "repeat_limit": 3,
        "limit_answers": False,
    }
    with pytest.raises(UnsupportedRuntime, match="--repeat-limit"):
        plan_for(tiny_model, runtime="mlx-vlm", repeat_limit=2)


def test_decode_concurrency_reaches_mlx_lm_and_the_front_s_slots(tiny_model: Path) -> None:
    """--decode-concurrency is mlx_lm's own flag in the worker's argv, the plan's field and the front's slots."""
    from mlx_agent.plan.front import front_config

    plan = plan_for(tiny_model, decode_concurrency=4)
    model = plan["models"][0]
    argv = model["worker"]["argv"]
    assert model["decode_concurrency"] == 4 and argv[argv.index("--decode-concurrency") + 1] == "4"
    assert front_config(plan)["models"][0]["worker_slots"] == 4
    assert plan_for(tiny_model)["models"][0]["decode_concurrency"] is None
    assert front_config(plan_for(tiny_model, decode_concurrency=4, kv_bits=4))["models"][0]["worker_slots"] == 1
    with pytest.raises(UnsupportedRuntime, match="--decode-concurrency"):
        plan_for(tiny_model, runtime="mlx-vlm", decode_concurrency=4)
