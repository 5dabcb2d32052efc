"""--prompt-lookup and --m5-prefill in the plan and at the entry: eligibility, flags, fingerprint, refusals."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from mlx_agent import accel_rules
from mlx_agent.canonical import plan_diff, with_hash
from mlx_agent.errors.commands import UnsupportedRuntime
from mlx_agent.plan import accel
from mlx_agent.plan import runtime as plan_runtime
from mlx_agent.plan.requests import ServeRequest
from mlx_agent.plan.serve_plan import build_serve_plan
from mlx_agent.records.plan import ModelPlan, ServePlan
from mlx_agent.runtime.entries import accel_entry
from mlx_agent.runtime.entries.mlx_lm_server import listening
from mlx_agent.worker_contract import Started, split_worker_argv
from tests.conftest import assert_valid
from tests.plan_support import native_executable

RULES = accel_rules.support()[0]
QWEN2_Q4 = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "torch_dtype": "float16",
    "quantization": {"bits": 4, "group_size": 64, "mode": "affine"},
}


def plan_for(model: Path, **kw: Any) -> ModelPlan:
    """Return the (only) model of the hashed plan for a model path with extra request fields."""
    plan = with_hash(build_serve_plan(ServeRequest(path=str(model), port=18998, **kw)))
    assert_valid("serve_plan", plan)
    return plan["models"][0]


def worker_args(model: ModelPlan) -> list[str]:
    """Return the wrapped worker's arguments after ``python -m mlx_agent.runtime mlx_lm``."""
    return model["worker"]["argv"][4:]


def entry_view(model: ModelPlan) -> tuple[accel_entry.AccelFlags, Started, list[str]]:
    """Return what the wrapped entry reads of the accelerations, what else it was given, and mlx_lm's own argv."""
    given, rest = split_worker_argv(worker_args(model))
    return accel_entry.accel_flags(given.contract), given, rest


def test_not_requested_is_native_and_adds_nothing(tiny_model: Path) -> None:
    """Without the options the plan records native profiles and the argv is unchanged."""
    plan = plan_for(tiny_model)
    assert plan["decode_profile"] == {"requested": False, "applied": False, "reasons": []}
    assert plan["prefill_kernel"] == {"requested": False, "eligible": False, "reasons": []}
    flags, _, _ = entry_view(plan)
    assert not flags.requested and not flags.versions and not flags.sources


def test_prompt_lookup_applies_here_and_passes_its_fingerprint(tiny_model: Path) -> None:
    """Prompt lookup is pure MLX: with tested versions it applies on this CPU, and argv carries the fingerprint."""
    plan = plan_for(tiny_model, prompt_lookup=True)
    lookup = plan["decode_profile"]
    assert (lookup["requested"], lookup["applied"], lookup["reasons"]) == (True, True, [])
    assert lookup.get("max_draft_tokens") == 8 and lookup.get("lookup_window") == 8192
    sources = lookup.get("sources") or {}
    assert set(sources) == set(accel_rules.LOOKUP_SOURCES) and all(sources.values())
    flags, given, native = entry_view(plan)
    assert flags.prompt_lookup and not flags.m5_prefill
    assert flags.versions == lookup.get("versions")
    assert flags.sources == {**sources, accel_rules.SUPPORT_NAME: lookup.get("support_sha256")}
    where = listening(given)
    assert native == ["--model", str(tiny_model), "--max-tokens", str(plan["context_window"])]  # no --max-tokens
    assert where.socket == "{socket}" and where.context_window == plan["context_window"]
    assert accel_entry.fingerprint_changes(flags) == []


def test_m5_prefill_is_recorded_as_not_eligible_here(tiny_model: Path) -> None:
    """On Linux the kernel profile says why it cannot apply; the entry still gets the flag and rechecks."""
    plan = plan_for(tiny_model, m5_prefill=True)
    prefill = plan["prefill_kernel"]
    assert prefill["requested"] is True and prefill["eligible"] is False
    assert prefill["reasons"] == [
        f"needs macOS 26.0+ with Metal; this is {sys.platform}",
        "mlx-metal None is not a supported version (0.32)",  # Linux has no mlx-metal
        "model_type 'llama' is not one of ['qwen2']",
        "weights are not quantized, not 4-bit with group size 64",
        "activations are float32, not float16",
    ]
    sources = prefill.get("sources") or {}
    assert set(sources) == set(accel_rules.PREFILL_SOURCES) and all(sources.values())
    assert prefill.get("min_rows") == 128 and "mlx-metal" in (prefill.get("versions") or {})
    flags, _, _ = entry_view(plan)
    assert flags.m5_prefill and not flags.prompt_lookup and "mlx-metal" in flags.versions


def test_both_options_combine(tiny_model: Path) -> None:
    """Both flags reach the entry with one fingerprint covering both."""
    plan = plan_for(tiny_model, prompt_lookup=True, m5_prefill=True)
    flags, _, _ = entry_view(plan)
    assert flags.prompt_lookup and flags.m5_prefill
    assert set(flags.sources) == {*accel_rules.LOOKUP_SOURCES, *accel_rules.PREFILL_SOURCES, accel_rules.SUPPORT_NAME}


def test_a_jit_worker_gets_the_same_flags_and_fingerprint(tiny_model: Path) -> None:
    """A JIT worker's argv carries exactly the eager worker's acceleration flags, versions and source hashes."""
    eager = entry_view(plan_for(tiny_model, prompt_lookup=True))[0]
    jit_plan = plan_for(tiny_model, prompt_lookup=True, jit=True)
    jit = entry_view(jit_plan)[0]
    assert (jit.prompt_lookup, jit.m5_prefill) == (eager.prompt_lookup, eager.m5_prefill) == (True, False)
    assert jit.versions == eager.versions == jit_plan["decode_profile"].get("versions")
    assert jit.sources == eager.sources and len(jit.sources) == len(accel_rules.LOOKUP_SOURCES) + 1


def test_a_foreign_entrypoint_keeps_its_native_argv(tiny_model: Path, tmp_path: Path) -> None:
    """A runtime from another environment runs unchanged: adapter_enabled false, nothing applied."""
    exe = str(native_executable(tmp_path))
    plan = plan_for(tiny_model, prompt_lookup=True, m5_prefill=True, runtime_executable=exe)
    assert plan["runtime"].get("adapter_enabled") is False
    assert plan["decode_profile"]["applied"] is False and accel.FOREIGN in plan["decode_profile"]["reasons"]
    assert plan["prefill_kernel"]["eligible"] is False and accel.FOREIGN in plan["prefill_kernel"]["reasons"]
    assert not any(word.startswith("--mlx-agent-") for word in plan["worker"]["argv"])


@pytest.mark.parametrize("option", ["prompt_lookup", "m5_prefill"])
def test_other_runtimes_reject_both_options(tiny_model: Path, option: str) -> None:
    """mlx-vlm has neither kernel in its recipe: the option is unsupported_runtime."""
    with pytest.raises(UnsupportedRuntime, match="mlx_lm option"):
        options: dict[str, Any] = {option: True}
        build_serve_plan(ServeRequest(path=str(tiny_model), runtime="mlx-vlm", **options))


def test_an_adapter_keeps_both_native(tiny_model: Path, tmp_path: Path) -> None:
    """With a served adapter, lookup does not apply and the kernel is excluded, both with a reason."""
    from tests.adapter_support import make_adapter

    adapter = tmp_path / "adapter"
    make_adapter(adapter)
    plan = plan_for(tiny_model, prompt_lookup=True, m5_prefill=True, adapter_path=str(adapter))
    assert plan["decode_profile"]["applied"] is False
    assert plan["decode_profile"]["reasons"] == ["an adapter is served, and adapters keep native generation"]
    assert plan["prefill_kernel"]["reasons"][-1] == "LoRA adapters are excluded"
    assert plan["prefill_kernel"]["reasons"][:-1] == plan_for(tiny_model, m5_prefill=True)["prefill_kernel"]["reasons"]
    assert not entry_view(plan)[0].prompt_lookup


def test_a_changed_kernel_source_makes_the_plan_stale(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry's sources include every runtime module and kernel file; a changed .metal changes the plan."""
    sources = plan_runtime.entry_sources()
    assert {
        "runtime/accel/kernels/m5_q4_prefill.metal",
        "runtime/accel/kernels/support.json",
        "runtime/accel/prompt_lookup.py",
        "runtime/entry.py",
    } <= set(sources)

    def whole_plan() -> ServePlan:
        return with_hash(build_serve_plan(ServeRequest(path=str(tiny_model), port=18998, m5_prefill=True)))

    before = whole_plan()
    from mlx_agent.files import sha256_file as real

    def changed(path: Path) -> str:
        return "0" * 64 if Path(path).name == "m5_q4_prefill.metal" else real(path)

    monkeypatch.setattr(accel_rules, "sha256_file", changed)
    monkeypatch.setattr(plan_runtime, "sha256_file", changed)
    after = whole_plan()
    fields = {c["field"] for c in plan_diff(before, after)}
    name = before["models"][0]["served_model_name"]
    assert f"models[{name}].prefill_kernel.sources.runtime/accel/kernels/m5_q4_prefill.metal" in fields
    assert f"models[{name}].runtime.entry_sources.runtime/accel/kernels/m5_q4_prefill.metal" in fields
    assert before.get("preview_hash") != after.get("preview_hash")
