"""mlx_lm's own decoding options in the plan: a draft model bound like the model, and KV-cache bits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.canonical import plan_diff
from mlx_agent.errors import DraftModelMismatch, InvalidArguments
from mlx_agent.errors.commands import UnsupportedRuntime
from mlx_agent.plan.front import front_config
from tests.fixtures.tiny_model import build_tiny_model
from tests.plan_support import plan_for


def test_a_draft_model_is_bound_passed_and_counted(tiny_model: Path, tiny_draft: Path) -> None:
    """--draft-model binds the draft's files, reaches mlx_lm's argv, counts in memory, and is rechecked at load."""
    without = plan_for(tiny_model)["models"][0]
    plan = plan_for(tiny_model, draft_model=str(tiny_draft), num_draft_tokens=4)
    model = plan["models"][0]
    draft = model["draft"]
    assert draft is not None and draft["num_draft_tokens"] == 4
    assert draft["source"]["path"] == str(tiny_draft)
    assert {f["name"] for f in draft["source"]["files"]} >= {"config.json", "model.safetensors"}
    argv = model["worker"]["argv"]
    assert (
        argv[argv.index("--draft-model") + 1] == str(tiny_draft) and argv[argv.index("--num-draft-tokens") + 1] == "4"
    )
    assert (model["weight_bytes"] or 0) > (without["weight_bytes"] or 0)
    assert front_config(plan)["models"][0]["draft_source"] == draft["source"]


def test_a_changed_draft_model_makes_the_plan_stale(tiny_model: Path, tiny_draft: Path, tmp_path: Path) -> None:
    """Editing the draft model's files changes the plan, and the diff names the draft's file."""
    import shutil

    draft = tmp_path / "draft"
    shutil.copytree(tiny_draft, draft)
    before = plan_for(tiny_model, draft_model=str(draft))
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**config, "rope_theta": 12345.0}))
    after = plan_for(tiny_model, draft_model=str(draft))
    assert before["preview_hash"] != after["preview_hash"]
    assert any("draft" in c["field"] and "config.json" in c["field"] for c in plan_diff(before, after))


def test_a_draft_of_another_vocabulary_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    """A draft model whose vocabulary differs from the served model's is draft_model_mismatch."""
    other = build_tiny_model(tmp_path / "other", vocab_size=384, num_layers=1)
    with pytest.raises(DraftModelMismatch, match="384"):
        plan_for(tiny_model, draft_model=str(other))


def test_kv_bits_reach_mlx_lm_and_the_record(tiny_model: Path) -> None:
    """--kv-bits and --kv-group-size are recorded and passed; the group size defaults to mlx_lm's 64."""
    model = plan_for(tiny_model, kv_bits=4, kv_group_size=32)["models"][0]
    assert model["kv_cache"] == {"kv_bits": 4, "kv_group_size": 32}
    argv = model["worker"]["argv"]
    assert argv[argv.index("--kv-bits") + 1] == "4" and argv[argv.index("--kv-group-size") + 1] == "32"
    assert plan_for(tiny_model, kv_bits=8)["models"][0]["kv_cache"] == {"kv_bits": 8, "kv_group_size": 64}
    assert plan_for(tiny_model)["models"][0]["kv_cache"] is None


@pytest.mark.parametrize(
    "options",
    [{"kv_bits": 7}, {"kv_group_size": 64}, {"kv_bits": 4, "kv_group_size": 48}, {"num_draft_tokens": 3}],
)
def test_contradicting_decoding_options_are_invalid_arguments(tiny_model: Path, options: dict[str, Any]) -> None:
    """Bits MLX cannot quantize to, a group size without bits, and draft tokens without a draft are refused."""
    with pytest.raises(InvalidArguments):
        plan_for(tiny_model, **options)


def test_prompt_lookup_gives_way_to_a_draft_model_and_kv_bits(tiny_model: Path, tiny_draft: Path) -> None:
    """With a draft model or a quantized KV cache the plan says lookup does not apply, and why."""
    drafted = plan_for(tiny_model, prompt_lookup=True, draft_model=str(tiny_draft))["models"][0]["decode_profile"]
    assert not drafted["applied"] and any("draft model" in r for r in drafted["reasons"])
    quantized = plan_for(tiny_model, prompt_lookup=True, kv_bits=4)["models"][0]["decode_profile"]
    assert not quantized["applied"] and any("--kv-bits" in r for r in quantized["reasons"])


def test_runtimes_refuse_decoding_options_they_lack(tiny_model: Path, tiny_draft: Path) -> None:
    """A runtime without an option's capability refuses it rather than serving without it.

    mlx-vlm's drafters take no token count; mlx_lm takes no drafter family and no TurboQuant half bits.
    """
    with pytest.raises(UnsupportedRuntime, match="--num-draft-tokens"):
        plan_for(tiny_model, runtime="mlx-vlm", draft_model=str(tiny_draft), num_draft_tokens=3)
    with pytest.raises(UnsupportedRuntime, match="--draft-kind"):
        plan_for(tiny_model, draft_model=str(tiny_draft), draft_kind="mtp")
    with pytest.raises(UnsupportedRuntime, match=r"--kv-bits 3\.5"):
        plan_for(tiny_model, kv_bits=3.5)


def test_an_mlx_vlm_draft_is_bound_with_its_family(tiny_model: Path, tiny_draft: Path) -> None:
    """mlx-vlm's --draft-model is bound as mlx_lm's is, and --draft-kind is recorded and passed beside it."""
    model = plan_for(tiny_model, runtime="mlx-vlm", draft_model=str(tiny_draft), draft_kind="eagle3")["models"][0]
    draft = model["draft"]
    assert draft is not None and draft["source"]["path"] == str(tiny_draft) and draft.get("draft_kind") == "eagle3"
    argv = model["worker"]["argv"]
    assert argv[argv.index("--draft-model") + 1] == str(tiny_draft) and argv[argv.index("--draft-kind") + 1] == "eagle3"
    assert "--num-draft-tokens" not in argv
