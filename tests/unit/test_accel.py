"""--prompt-lookup and --m5-prefill in the plan and at the entry: eligibility, flags, fingerprint, refusals."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from mlx_agent import accel_rules, wire
from mlx_agent.errors import UnsupportedRuntime
from mlx_agent.plan import accel
from mlx_agent.plan import runtime as plan_runtime
from mlx_agent.plan.canonical import plan_diff, with_hash
from mlx_agent.plan.serve_plan import ServeRequest, build_serve_plan
from mlx_agent.runtime import accel_entry
from tests.conftest import assert_valid

RULES = accel_rules.support()[0]
QWEN2_Q4 = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "torch_dtype": "float16",
            "quantization": {"bits": 4, "group_size": 64, "mode": "affine"}}


def plan_for(model: Path, **kw: Any) -> dict[str, Any]:
    """Return the hashed plan for a model path with extra request fields."""
    return with_hash(build_serve_plan(ServeRequest(path=str(model), port=18998, **kw)))


def native_executable(tmp_path: Path) -> Path:
    """Return an executable runtime from "another environment" (this interpreter, launched natively)."""
    exe = tmp_path / "mlx_lm.server"
    exe.write_text(f"#!{sys.executable}\nprint('server')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_not_requested_is_native_and_adds_nothing(tiny_model: Path) -> None:
    """Without the options the plan records native profiles and the argv is unchanged."""
    plan = plan_for(tiny_model)
    assert plan["decode_profile"] == {"requested": "native", "applied": False, "reasons": []}
    assert plan["prefill_kernel"] == {"requested": "native", "eligible": False, "reasons": []}
    assert not any(word.startswith("--mlx-agent-") for word in plan["argv"])


def test_prompt_lookup_applies_here_and_passes_its_fingerprint(tiny_model: Path) -> None:
    """Prompt lookup is pure MLX: with tested versions it applies on this CPU, and argv carries the fingerprint."""
    plan = plan_for(tiny_model, prompt_lookup=True)
    assert_valid("serve_plan", plan)
    decode = plan["decode_profile"]
    assert (decode["requested"], decode["applied"], decode["reasons"]) == ("prompt_lookup", True, [])
    assert decode["max_draft_tokens"] == 8 and decode["lookup_window"] == 8192
    assert set(decode["sources"]) == set(accel_rules.DECODE_SOURCES) and all(decode["sources"].values())
    flags, rest = accel_entry.split_accel_flags(plan["argv"][4:])
    assert flags.prompt_lookup and not flags.m5_prefill
    assert flags.versions == decode["versions"]
    assert flags.sources == {**decode["sources"], accel_rules.SUPPORT_NAME: decode["support_sha256"]}
    assert rest == ["--model", str(tiny_model), "--host", "127.0.0.1", "--port", "18998", "--max-tokens", "512"]
    assert accel_entry.fingerprint_changes(flags) == []


def test_m5_prefill_is_recorded_as_not_eligible_here(tiny_model: Path) -> None:
    """On Linux the kernel profile says why it cannot apply; the entry still gets the flag and rechecks."""
    plan = plan_for(tiny_model, m5_prefill=True)
    assert_valid("serve_plan", plan)
    prefill = plan["prefill_kernel"]
    assert prefill["requested"] == "m5_q4" and prefill["eligible"] is False
    assert any("needs macOS 26.0+" in r for r in prefill["reasons"])
    assert any("model_type 'llama'" in r for r in prefill["reasons"])
    assert set(prefill["sources"]) == set(accel_rules.PREFILL_SOURCES) and all(prefill["sources"].values())
    assert prefill["min_rows"] == 128 and "mlx-metal" in prefill["versions"]
    flags, _ = accel_entry.split_accel_flags(plan["argv"][4:])
    assert flags.m5_prefill and not flags.prompt_lookup and "mlx-metal" in flags.versions


def test_both_options_combine(tiny_model: Path) -> None:
    """Both flags reach the entry with one fingerprint covering both."""
    plan = plan_for(tiny_model, prompt_lookup=True, m5_prefill=True)
    flags, _ = accel_entry.split_accel_flags(plan["argv"][4:])
    assert flags.prompt_lookup and flags.m5_prefill
    assert set(flags.sources) == {*accel_rules.DECODE_SOURCES, *accel_rules.PREFILL_SOURCES, accel_rules.SUPPORT_NAME}


def test_a_jit_worker_gets_the_flags(tiny_model: Path) -> None:
    """The JIT gateway's worker argv carries the same acceleration flags and fingerprint."""
    plan = plan_for(tiny_model, prompt_lookup=True, jit=True)
    worker = json.dumps(plan["jit"]["config"])
    assert wire.PROMPT_LOOKUP_FLAG in worker and wire.EXPECT_VERSIONS_FLAG in worker


def test_a_foreign_entrypoint_keeps_its_native_argv(tiny_model: Path, tmp_path: Path) -> None:
    """A runtime from another environment runs unchanged: adapter_enabled false, nothing applied."""
    exe = str(native_executable(tmp_path))
    plan = plan_for(tiny_model, prompt_lookup=True, m5_prefill=True, runtime_executable=exe)
    assert plan["runtime"]["adapter_enabled"] is False
    assert plan["decode_profile"]["applied"] is False and accel.FOREIGN in plan["decode_profile"]["reasons"]
    assert plan["prefill_kernel"]["eligible"] is False and accel.FOREIGN in plan["prefill_kernel"]["reasons"]
    assert not any(word.startswith("--mlx-agent-") for word in plan["argv"])


@pytest.mark.parametrize("option", ["prompt_lookup", "m5_prefill"])
def test_other_runtimes_reject_both_options(tiny_model: Path, option: str) -> None:
    """mlx-vlm has neither kernel in its recipe: the option is unsupported_runtime."""
    with pytest.raises(UnsupportedRuntime, match="mlx_lm option"):
        options: dict[str, Any] = {option: True}
        build_serve_plan(ServeRequest(path=str(tiny_model), runtime="mlx-vlm", **options))


def test_an_adapter_keeps_both_native(tiny_model: Path, tmp_path: Path) -> None:
    """With a served adapter, lookup does not apply and the kernel is excluded, both with a reason."""
    from tests.unit.test_adapter import make_adapter

    adapter = tmp_path / "adapter"
    make_adapter(adapter)
    plan = plan_for(tiny_model, prompt_lookup=True, m5_prefill=True, adapter_path=str(adapter))
    assert plan["decode_profile"]["applied"] is False
    assert any("adapter" in r for r in plan["decode_profile"]["reasons"])
    assert any("LoRA adapters are excluded" in r for r in plan["prefill_kernel"]["reasons"])
    assert wire.PROMPT_LOOKUP_FLAG not in plan["argv"]


def test_a_changed_kernel_source_makes_the_plan_stale(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry's sources include every runtime module and kernel file; a changed .metal changes the plan."""
    sources = plan_runtime.entry_sources()
    assert {"runtime/kernels/m5_q4_prefill.metal", "runtime/kernels/support.json", "runtime/prompt_lookup.py",
            "runtime/entry.py"} <= set(sources)
    before = plan_for(tiny_model, m5_prefill=True)
    from mlx_agent.files import sha256_file as real

    def changed(path: Path) -> str:
        return "0" * 64 if Path(path).name == "m5_q4_prefill.metal" else real(path)

    monkeypatch.setattr(accel_rules, "sha256_file", changed)
    monkeypatch.setattr(plan_runtime, "sha256_file", changed)
    after = plan_for(tiny_model, m5_prefill=True)
    fields = {c["field"] for c in plan_diff(before, after)}
    assert "prefill_kernel.sources.runtime/kernels/m5_q4_prefill.metal" in fields
    assert "runtime.entry_sources.runtime/kernels/m5_q4_prefill.metal" in fields
    assert before["preview_hash"] != after["preview_hash"]
