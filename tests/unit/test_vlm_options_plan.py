"""mlx-vlm's start-up options in the plan: their bounds, their capabilities, their flags, and the plan's hash.

A vision model here is a directory of small files (a config.json with a vision tower, a tokenizer, one tiny
safetensors file). The checks of the options themselves are pure (the fast tier); a whole plan finds the
installed runtime's package, which imports its parent package, so those tests are not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import AdapterInvalid, TrustRemoteCodeRefused, UnsupportedRuntime
from mlx_agent.plan import runtime_select
from mlx_agent.plan.adapter import resolve_vlm_adapter
from mlx_agent.plan.decoding import kv_cache_plan, passed_through
from mlx_agent.plan.models_file import model_requests, read_models_file
from mlx_agent.plan.recipes import load_recipe
from mlx_agent.plan.requests import ModelRequest
from mlx_agent.records.plan import ModelPlan, Recipe
from tests.plan_support import plan_for

VLM = "mlx-vlm"
ADAPTER_FILES = ("adapter_config.json", "adapters.safetensors")


@pytest.fixture
def vlm_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Return a directory that plans as a Qwen2-VL model: config with a vision tower, tokenizer, weights.

    The installed packages' model types are read from their files (every runtime has a qwen2_vl class here).
    """
    monkeypatch.setattr(runtime_select, "model_support", lambda package, paths: ({"qwen2_vl"}, {}))
    folder = tmp_path / "tiny-vl"
    folder.mkdir()
    config = {"model_type": "qwen2_vl", "vision_config": {"hidden_size": 8}, "image_token_id": 5, "vocab_size": 64}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0]['content'] }}"}))
    (folder / "tokenizer.json").write_text("{}")
    save_file({"lm_head.weight": np.zeros((2, 2), dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


def recipe(name: str) -> Recipe:
    """Return a shipped recipe."""
    return load_recipe(name)[0]


def vlm_model(folder: Path, **options: Any) -> ModelPlan:
    """Return the plan of ``folder`` served by mlx-vlm with ``options``."""
    return plan_for(folder, runtime=VLM, **options)["models"][0]


def argv_value(model: ModelPlan, flag: str) -> str | None:
    """Return the word after ``flag`` in the worker's argv, or None without the flag."""
    argv = model["worker"]["argv"]
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_the_options_reach_the_argv_and_the_record(vlm_dir: Path) -> None:
    """Each option is recorded under its flag's name and passed to mlx_vlm's own flag of that name."""
    model = vlm_model(vlm_dir, thinking_budget=7, vision_cache_size=3, max_kv_size=512)
    assert (model["thinking_budget"], model["vision_cache_size"], model["max_kv_size"]) == (7, 3, 512)
    assert argv_value(model, "--thinking-budget") == "7"
    assert argv_value(model, "--vision-cache-size") == "3"
    assert argv_value(model, "--max-kv-size") == "512"
    plain = vlm_model(vlm_dir)
    assert (plain["thinking_budget"], plain["vision_cache_size"], plain["max_kv_size"]) == (None, None, None)
    assert not {"--thinking-budget", "--vision-cache-size", "--max-kv-size"} & set(plain["worker"]["argv"])


@pytest.mark.parametrize(
    ("options", "record"),
    [
        ({"kv_bits": 3.5}, {"kv_bits": 3.5, "kv_group_size": 64, "kv_quant_scheme": "turboquant"}),
        ({"kv_bits": 4.0}, {"kv_bits": 4, "kv_group_size": 64, "kv_quant_scheme": "uniform"}),
        (
            {"kv_bits": 4, "kv_quant_scheme": "turboquant", "kv_group_size": 32},
            {"kv_bits": 4, "kv_group_size": 32, "kv_quant_scheme": "turboquant"},
        ),
    ],
)
def test_kv_bits_and_scheme_are_recorded_as_mlx_vlm_runs_them(
    vlm_dir: Path, options: dict[str, Any], record: dict[str, Any]
) -> None:
    """A half width is TurboQuant's; a whole one is written whole; the scheme is always written for mlx-vlm."""
    model = vlm_model(vlm_dir, **options)
    assert argv_value(model, "--kv-bits") == str(record["kv_bits"])
    assert argv_value(model, "--kv-quant-scheme") == record["kv_quant_scheme"]
    assert model["kv_cache"] == record


@pytest.mark.fast
def test_mlx_lm_keeps_its_whole_kv_bits_and_refuses_the_rest() -> None:
    """mlx_lm's record is unchanged (no scheme), and half bits or a scheme are unsupported_runtime there."""
    assert kv_cache_plan(ModelRequest(kv_bits=8.0), recipe("mlx_lm")) == {"kv_bits": 8, "kv_group_size": 64}
    with pytest.raises(UnsupportedRuntime, match=r"3\.5"):
        kv_cache_plan(ModelRequest(kv_bits=3.5), recipe("mlx_lm"))
    with pytest.raises(UnsupportedRuntime, match="--kv-quant-scheme"):
        kv_cache_plan(ModelRequest(kv_bits=4, kv_quant_scheme="uniform"), recipe("mlx_lm"))


@pytest.mark.fast
@pytest.mark.parametrize("name", ["thinking_budget", "max_kv_size", "vision_cache_size"])
def test_a_runtime_without_the_capability_refuses_the_option(name: str) -> None:
    """mlx_lm's and the embedding recipe's lack of each capability is unsupported_runtime, naming the flag."""
    for runtime in ("mlx_lm", "mlx-vlm-embed"):
        with pytest.raises(UnsupportedRuntime, match="--" + name.replace("_", "-")):
            passed_through(ModelRequest(**{name: 4}), recipe(runtime))
    assert passed_through(ModelRequest(**{name: 4}), recipe(VLM))[name] == 4


@pytest.mark.fast
@pytest.mark.parametrize(
    "options",
    [
        {"kv_bits": 7},
        {"kv_bits": 1},
        {"kv_bits": 3.25},
        {"kv_bits": 8.5},
        {"kv_quant_scheme": "turboquant"},
        {"kv_bits": 3.5, "kv_quant_scheme": "uniform"},
        {"kv_bits": 4, "max_kv_size": 256},
        {"max_kv_size": 0},
        {"vision_cache_size": 0},
        {"thinking_budget": 0},
        {"draft_kind": "mtp"},
        {"kv_quant_scheme": "polar", "kv_bits": 4},
    ],
)
def test_out_of_bounds_or_contradicting_options_are_invalid_arguments(vlm_dir: Path, options: dict[str, Any]) -> None:
    """Bits neither MLX nor TurboQuant take, a scheme without bits or against them, and zero sizes are refused."""
    with pytest.raises(InvalidArguments):
        vlm_model(vlm_dir, **options)


@pytest.mark.fast
def test_trust_remote_code_is_refused_with_its_reason(vlm_dir: Path) -> None:
    """--trust-remote-code is trust_remote_code_refused, saying the folder's code would run unreviewed."""
    with pytest.raises(TrustRemoteCodeRefused) as caught:
        vlm_model(vlm_dir, trust_remote_code=True)
    assert caught.value.code == "trust_remote_code_refused" and "no plan reviews" in str(caught.value)
    assert "--trust-remote-code" in caught.value.remediation


@pytest.mark.parametrize(
    "options",
    [
        {"thinking_budget": 7},
        {"thinking_budget": 8},
        {"max_kv_size": 512},
        {"vision_cache_size": 3},
        {"kv_bits": 3.5},
        {"kv_bits": 4},
        {"kv_bits": 4, "kv_quant_scheme": "turboquant"},
    ],
)
def test_each_option_changes_the_preview_hash(vlm_dir: Path, options: dict[str, Any]) -> None:
    """The plan's hash covers each option: a preview reviewed without it is stale with it."""
    hashes = {plan_for(vlm_dir, runtime=VLM)["preview_hash"], plan_for(vlm_dir, runtime=VLM, **options)["preview_hash"]}
    assert len(hashes) == 2


@pytest.mark.fast
def test_a_models_file_takes_the_options_as_keys(vlm_dir: Path, tmp_path: Path) -> None:
    """A [[model]] table names each option as its field; a TOML float gives TurboQuant's half bits."""
    path = tmp_path / "models.toml"
    path.write_text(
        "[[model]]\n"
        f'name = "v"\npath = "{vlm_dir}"\nruntime = "mlx-vlm"\n'
        'kv_bits = 3.5\nkv_quant_scheme = "turboquant"\nthinking_budget = 7\nvision_cache_size = 3\n'
    )
    [spec] = model_requests(read_models_file(str(path)), {})
    assert (spec.kv_bits, spec.kv_quant_scheme, spec.thinking_budget, spec.vision_cache_size) == (
        3.5,
        "turboquant",
        7,
        3,
    )


KEYS = ["language_model.model.layers.0.self_attn.q_proj", "language_model.model.layers.0.mlp.up_proj"]


def vlm_adapter(
    folder: Path, *, weights: str = "adapters.safetensors", tensors: list[str] | None = None, **config: Any
) -> Path:
    """Write an adapter shaped as mlx_vlm's trainer saves one (``keys`` naming its layers) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    saved = {"fine_tune_type": "lora", "num_layers": -1, "lora_parameters": {"rank": 2, "scale": 1.0, "keys": KEYS}}
    (folder / "adapter_config.json").write_text(json.dumps({**saved, **config}))
    names = tensors if tensors is not None else [f"{k}.{part}" for k in KEYS for part in ("lora_a", "lora_b")]
    save_file({name: np.zeros((2, 2), dtype=np.float32) for name in names}, str(folder / weights))
    return folder


@pytest.mark.fast
@pytest.mark.parametrize("weights", ["adapters.safetensors", "weights.safetensors"])
def test_an_mlx_vlm_adapter_binds_the_two_files_its_loader_reads(tmp_path: Path, weights: str) -> None:
    """mlx_vlm reads adapters.safetensors, else weights.safetensors, and adapter_config.json: those are bound."""
    record = resolve_vlm_adapter(str(vlm_adapter(tmp_path / "a", weights=weights)))
    assert [f["name"] for f in record["files"]] == ["adapter_config.json", weights]
    assert (record["fine_tune_type"], record["num_layers"]) == ("lora", -1)


@pytest.mark.fast
@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"fine_tune_type": "full"}, "fine_tune_type"),
        ({"lora_parameters": {"rank": 2}}, "keys"),  # mlx_lm's layout: mlx-vlm would adapt other names
        ({"tensors": ["model.layers.0.self_attn.q_proj.lora_a"]}, "does not adapt"),
        ({"tensors": [f"{KEYS[0]}.weight"]}, "adapter tensors"),
    ],
)
def test_an_adapter_mlx_vlm_would_not_apply_as_bound_is_adapter_invalid(
    tmp_path: Path, changes: dict[str, Any], problem: str
) -> None:
    """A full fine-tune, mlx_lm's layout, stray layers or foreign tensors are refused, not loaded and ignored."""
    with pytest.raises(AdapterInvalid, match=problem):
        resolve_vlm_adapter(str(vlm_adapter(tmp_path / "a", **changes)))


def test_the_mlx_vlm_plan_passes_the_adapter_and_rechecks_it(vlm_dir: Path, tmp_path: Path) -> None:
    """--adapter-path reaches mlx_vlm's flag; both files are rechecked at each load; the hash covers them."""
    adapter = vlm_adapter(tmp_path / "adapter")
    model = vlm_model(vlm_dir, adapter_path=str(adapter))
    assert argv_value(model, "--adapter-path") == str(adapter)
    assert [c["path"] for c in model["file_checks"]] == [str(adapter / n) for n in ADAPTER_FILES]
    before = plan_for(vlm_dir, runtime=VLM, adapter_path=str(adapter))["preview_hash"]
    config = adapter / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "num_layers": 1}))
    assert plan_for(vlm_dir, runtime=VLM, adapter_path=str(adapter))["preview_hash"] != before
