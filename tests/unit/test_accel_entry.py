"""The entry's side of --prompt-lookup and --m5-prefill: rules, flags, fingerprint, refusal, and its log lines."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mlx_agent import accel_rules
from mlx_agent.errors import RuntimeChanged, error_class
from mlx_agent.plan import accel
from mlx_agent.plan.recipes import load_recipe
from mlx_agent.plan.runtime import resolve_runtime
from mlx_agent.runtime import entry
from mlx_agent.runtime.accel import m5_prefill
from mlx_agent.runtime.entries import accel_entry
from mlx_agent.supervise.readiness import launch_failed
from mlx_agent.wire import REFUSAL_PREFIX as ERROR_PREFIX
from mlx_agent.worker_contract import split_worker_argv
from tests.contract_support import contract
from tests.unit.m5_prefill_support import FakeKernel, qwen2_model

RULES = accel_rules.support()[0]
QWEN2_Q4 = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "torch_dtype": "float16",
    "quantization": {"bits": 4, "group_size": 64, "mode": "affine"},
}


def planned_flags() -> list[str]:
    """Return the contract the plan gives for both options on this machine (the rest plain)."""
    recipe, sha = load_recipe("mlx_lm")
    runtime = resolve_runtime("mlx_lm", recipe, sha, None)
    lookup = accel.prompt_lookup(True, recipe, runtime)
    prefill = accel.m5_prefill(True, recipe, runtime, QWEN2_Q4)
    use_lookup, use_kernel, versions, sources = accel.entry_fingerprint(lookup, prefill)
    return contract(prompt_lookup=use_lookup, m5_prefill=use_kernel, versions=versions, sources=sources)


def test_untested_versions_keep_native_decoding() -> None:
    """Prompt lookup applies only with the mlx and mlx-lm minor versions listed in support.json."""
    rules = RULES["prompt_lookup"]
    assert accel_rules.lookup_version_reasons({"mlx": "0.32.4", "mlx-lm": "0.32.2"}, rules) == []
    reasons = accel_rules.lookup_version_reasons({"mlx": "0.31.1", "mlx-lm": None}, rules)
    assert reasons == ["mlx 0.31.1 is not a tested version (0.32)", "mlx-lm None is not a tested version (0.32)"]


def test_prefill_platform_rules() -> None:
    """An M5-era system (macOS 26, the pinned minor versions) passes; anything else names what is wrong."""
    rules = RULES["m5_prefill"]
    good: dict[str, str | None] = {"mlx": "0.32.4", "mlx-metal": "0.32.4", "mlx-lm": "0.32.2"}
    assert accel_rules.prefill_platform_reasons("darwin", "26.0", good, rules) == []
    assert accel_rules.prefill_platform_reasons("darwin", "26.1.2", good, rules) == []
    assert accel_rules.prefill_platform_reasons("darwin", "15.5", good, rules) == ["macOS 15.5 is older than 26.0"]
    linux = accel_rules.prefill_platform_reasons("linux", None, good, rules)
    assert linux == ["needs macOS 26.0+ with Metal; this is linux"]
    reasons = accel_rules.prefill_platform_reasons("darwin", "26.0", {**good, "mlx-metal": "0.31.1"}, rules)
    assert reasons == ["mlx-metal 0.31.1 is not a supported version (0.32)"]
    assert accel_rules.gpu_reasons("applegpu_g17s", rules) == []
    assert accel_rules.gpu_reasons("applegpu_g16s", rules) == ["GPU architecture applegpu_g16s is not applegpu_g17s"]


def test_the_kernel_is_eligible_on_the_stack_this_project_installs() -> None:
    """The versions installed from this project's pins (mlx-metal as mlx's own) pass the kernel's version rule."""
    installed = accel_rules.installed_versions(("mlx", "mlx-lm"))
    versions = {**installed, "mlx-metal": installed["mlx"]}
    assert accel_rules.prefill_platform_reasons("darwin", "26.0", versions, RULES["m5_prefill"]) == []
    assert RULES["m5_prefill"]["first_written_for"] == {"mlx": "0.31.1", "mlx-metal": "0.31.1", "mlx-lm": "0.29.1"}


def test_a_fitting_model_has_no_shape_reasons() -> None:
    """A Q4 group-64 fp16 Qwen2 whose dimensions divide by 64 fits the kernel."""
    assert accel_rules.model_shape_reasons(QWEN2_Q4, RULES["m5_prefill"]) == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"model_type": "llama"}, "model_type 'llama' is not one of ['qwen2']"),
        (
            {"quantization": {"bits": 8, "group_size": 64}},
            "weights are 8-bit with group size 64, not 4-bit with group size 64",
        ),
        (
            {"quantization": {"bits": 4, "group_size": 32}},
            "weights are 4-bit with group size 32, not 4-bit with group size 64",
        ),
        ({"quantization": {"bits": 4, "group_size": 64, "mode": "mxfp4"}}, "quantization mode is not affine"),
        ({"quantization": None}, "weights are not quantized, not 4-bit with group size 64"),
        ({"hidden_size": 900}, "hidden_size 900 is not divisible by 64"),
        ({"intermediate_size": 4860}, "intermediate_size 4860 is not divisible by 64"),
        ({"torch_dtype": "bfloat16"}, "activations are bfloat16, not float16"),
    ],
)
def test_each_model_shape_rule(change: dict[str, Any], reason: str) -> None:
    """Each rule of the model check gives its own reason, naming what the model has, and only that reason."""
    assert accel_rules.model_shape_reasons({**QWEN2_Q4, **change}, RULES["m5_prefill"]) == [reason]


def test_the_contract_gives_the_flags_and_the_fingerprint() -> None:
    """The entry reads both options and their fingerprint from the contract as the plan wrote them."""
    argv = [
        "--model",
        "m",
        *contract(
            prompt_lookup=True,
            m5_prefill=True,
            versions={"mlx": "1.0", "mlx-metal": None},
            sources={"runtime/x.py": "abc"},
        ),
        "--port",
        "1",
    ]
    given, rest = split_worker_argv(argv)
    assert rest == ["--model", "m", "--port", "1"]
    flags = accel_entry.accel_flags(given.contract)
    assert flags == accel_entry.AccelFlags(True, True, {"mlx": "1.0", "mlx-metal": None}, {"runtime/x.py": "abc"})


def test_a_changed_dependency_or_source_is_named() -> None:
    """Each version or file that differs from the fingerprint is one change record."""
    flags = accel_entry.AccelFlags(
        True,
        False,
        {"mlx": "0.0.1", "mlx-metal": None},
        {"runtime/accel/prompt_lookup.py": "0" * 64, "runtime/gone.py": None},
    )
    changes = accel_entry.fingerprint_changes(flags)
    assert [c["field"] for c in changes] == ["versions.mlx", "sources.runtime/accel/prompt_lookup.py"]
    assert changes[0]["expected"] == "0.0.1" and changes[0]["actual"]


def test_the_entry_refuses_with_runtime_changed(capsys: pytest.CaptureFixture[str]) -> None:
    """A fingerprint that no longer holds stops the entry before anything loads, with a runtime_changed line."""
    argv = ["mlx_lm", "--model", "m", *contract(prompt_lookup=True, versions={"mlx": "0.0.1", "mlx-lm": "0.0.1"})]
    with pytest.raises(SystemExit) as exit_info:
        entry.main(argv)
    assert exit_info.value.code == 3
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(ERROR_PREFIX)
    report = json.loads(line[len(ERROR_PREFIX) :])
    assert report["code"] == "runtime_changed" and len(report["details"]["changes"]) == 2
    assert error_class("runtime_changed") is RuntimeChanged


def test_the_supervisor_reports_runtime_changed(tmp_path: Path) -> None:
    """The refusal line in the server log becomes the runtime_changed error at confirm."""
    log = tmp_path / "server.log"
    report = {"code": "runtime_changed", "message": "changed", "details": {"changes": [{"field": "versions.mlx"}]}}
    log.write_text(f"starting\n{ERROR_PREFIX}{json.dumps(report)}\n")
    error = launch_failed(3, log)
    assert isinstance(error, RuntimeChanged) and error.details["changes"] == [{"field": "versions.mlx"}]


def test_the_entry_strips_its_flags_before_mlx_lm(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a matching fingerprint the entry hands mlx_lm the argv without the contract."""
    from mlx_agent.runtime.entries import mlx_lm_server

    seen: dict[str, Any] = {}

    def serve(argv: list[str], given: Any, flags: Any) -> int:
        seen.update(argv=argv, flags=flags)
        return 0

    monkeypatch.setattr(mlx_lm_server, "serve", serve)
    native = ["--model", "/m", "--host", "127.0.0.1", "--port", "1", "--max-tokens", "5"]
    assert entry.main(["mlx_lm", *native[:2], *planned_flags(), *native[2:]]) == 0
    assert seen["argv"] == native
    assert seen["flags"].prompt_lookup and seen["flags"].m5_prefill
    assert accel_rules.SUPPORT_NAME in seen["flags"].sources and "mlx-metal" in seen["flags"].versions


def test_the_planned_fingerprint_holds_here() -> None:
    """What the plan records of this environment is what the entry finds in it."""
    given, rest = split_worker_argv(planned_flags())
    flags = accel_entry.accel_flags(given.contract)
    assert rest == [] and flags.requested
    assert set(flags.sources) == {*accel_rules.LOOKUP_SOURCES, *accel_rules.PREFILL_SOURCES, accel_rules.SUPPORT_NAME}
    assert accel_entry.fingerprint_changes(flags) == []


def test_lookup_is_on_for_an_ordinary_model_and_off_with_an_adapter(caplog: pytest.LogCaptureFixture) -> None:
    """The entry turns lookup on for a plain-KVCache model, and logs why not when an adapter is served."""
    caplog.set_level(logging.INFO)
    settings = accel_entry.prompt_lookup_settings(provider(qwen2_model()), RULES["prompt_lookup"])
    assert (settings.max_draft, settings.window) == (8, 8192)
    assert "prompt lookup is on" in caplog.text
    assert accel_entry.prompt_lookup_settings(provider(qwen2_model(), adapter="/a"), RULES["prompt_lookup"]) is None
    assert "prompt lookup is off (an adapter is served" in caplog.text


def test_a_rotating_cache_keeps_native_generation() -> None:
    """A model whose cache is not an ordinary KVCache (here a sliding window) never takes the lookup path."""
    from mlx_lm.models import cache

    model = qwen2_model()
    rotating: Any = cache.RotatingKVCache
    model.make_cache = lambda: [rotating(max_size=64) for _ in model.layers]
    assert accel_entry.prompt_lookup_settings(provider(model), RULES["prompt_lookup"]) is None


def provider(model: Any, adapter: str | None = None) -> Any:
    """Return a loaded-model provider as mlx_lm's server holds it."""
    return SimpleNamespace(model=model, cli_args=SimpleNamespace(adapter_path=adapter), draft_model=None)


def test_the_log_says_zero_layers_here(caplog: pytest.LogCaptureFixture) -> None:
    """On Linux the entry logs why the kernel is not eligible and that it adapted 0 layers."""
    caplog.set_level(logging.INFO)
    assert accel_entry.apply_prefill_kernel(provider(qwen2_model()), RULES["m5_prefill"]) == 0
    assert "needs macOS 26.0+ with Metal" in caplog.text and "adapted 0 layers" in caplog.text


def test_the_log_counts_adapted_layers_on_an_eligible_system(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the system qualifies (faked here) the log names how many layers took the kernel."""
    monkeypatch.setattr(accel_rules, "prefill_platform_reasons", lambda *_: [])
    monkeypatch.setattr(accel_entry, "_gpu_architecture", lambda: "applegpu_g17s")
    monkeypatch.setattr(m5_prefill, "q4_matmul", FakeKernel())
    caplog.set_level(logging.INFO)
    assert accel_entry.apply_prefill_kernel(provider(qwen2_model()), RULES["m5_prefill"]) == 6
    assert "M5 prefill kernel: adapted 6 layers" in caplog.text


def test_an_adapter_excludes_the_kernel(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """LoRA adapters are excluded even on an eligible system."""
    monkeypatch.setattr(accel_rules, "prefill_platform_reasons", lambda *_: [])
    monkeypatch.setattr(accel_entry, "_gpu_architecture", lambda: "applegpu_g17s")
    caplog.set_level(logging.INFO)
    assert accel_entry.apply_prefill_kernel(provider(qwen2_model(), adapter="/a"), RULES["m5_prefill"]) == 0
    assert "LoRA adapters are excluded" in caplog.text
