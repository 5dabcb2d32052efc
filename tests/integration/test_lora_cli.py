"""lora train and lora status through the real CLI: previews, refusals and stale hashes (nothing trains here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LAUNCHER, Agent, assert_valid
from tests.fixtures.tiny_dataset import write_dataset
from tests.lora_support import assert_status_entry, train_args


def test_preview_prints_a_valid_plan_and_starts_nothing(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """A preview is an ok envelope with the plan and its hash; no receipt and no adapter directory appear."""
    data = write_dataset(tmp_path / "data")
    result = agent.run(*train_args(tiny_model, data, tmp_path / "adapter"))
    assert result.rc == 0, result.stdout + result.stderr
    assert result.doc["operation"] == "lora.train" and result.data["requires_confirmation"] is True
    assert_valid("training_plan", result.data["plan"])
    assert not (tmp_path / "adapter").exists()
    assert not list((agent.home / "receipts" / "train").glob("*.json"))


def test_fast_path_and_click_give_the_same_plan(
    agent: Agent, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The click-free --json path and the Click command build the same plan from the same option table."""
    from click.testing import CliRunner

    from mlx_agent.cli.app import cli

    data = write_dataset(tmp_path / "data")
    args = train_args(tiny_model, data, tmp_path / "adapter")
    fast = agent.run(*args)
    for key, value in agent.env.items():
        monkeypatch.setenv(key, value)
    slow = CliRunner().invoke(cli, [*args, "--json"])
    assert slow.exit_code == 0, slow.output
    assert json.loads(slow.output)["data"]["plan"] == fast.data["plan"]


@pytest.mark.parametrize("case", ["missing_dir", "no_train", "no_valid", "too_few_lines"])
def test_dataset_refusals(agent: Agent, tiny_model: Path, tmp_path: Path, case: str) -> None:
    """A missing dataset, or one without usable train.jsonl/valid.jsonl, is refused with its code and exit 1."""
    data = tmp_path / "data"
    if case != "missing_dir":
        train = {"no_train": 0, "too_few_lines": 1}.get(case, 8)
        write_dataset(data, train=train, valid=0 if case == "no_valid" else 4)
    result = agent.run(*train_args(tiny_model, data, tmp_path / "adapter"))
    assert result.rc == 1
    assert result.code == ("dataset_not_found" if case == "missing_dir" else "dataset_invalid")
    assert result.doc["error"]["remediation"]


def test_non_empty_adapter_directory_is_refused(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """An adapter directory that already holds files is adapter_path_not_empty."""
    data = write_dataset(tmp_path / "data")
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "keep.txt").write_text("mine")
    result = agent.run(*train_args(tiny_model, data, tmp_path / "adapter"))
    assert result.rc == 1 and result.code == "adapter_path_not_empty"
    assert (tmp_path / "adapter" / "keep.txt").read_text() == "mine"


def test_too_many_layers_is_an_invalid_argument(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """mlx_lm's default of 16 layers on a 2-layer model is refused at preview, not after loading."""
    data = write_dataset(tmp_path / "data")
    args = train_args(tiny_model, data, tmp_path / "adapter")
    args[args.index("--num-layers") + 1] = "16"
    result = agent.run(*args)
    assert result.rc == 2 and result.code == "invalid_arguments"
    assert result.doc["error"]["details"]["model_layers"] == 2


def test_missing_required_option_is_a_usage_error(agent: Agent, tiny_model: Path) -> None:
    """Without --data the command is a usage error (exit 2) in one envelope."""
    result = agent.run("lora", "train", "--path", str(tiny_model), "--adapter-path", "/tmp/x")
    assert result.rc == 2 and result.code == "invalid_arguments"


def test_confirm_needs_a_preview_hash(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """--confirm without --preview-hash is refused and starts nothing."""
    data = write_dataset(tmp_path / "data")
    result = agent.run(*train_args(tiny_model, data, tmp_path / "adapter"), "--confirm")
    assert result.rc == 1 and result.code == "preview_hash_required"
    assert not (agent.home / "receipts" / "train").exists()


def test_stale_hash_after_a_dataset_byte_changes(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """Confirm after one dataset byte changed is preview_stale, naming that file's sha256 old and new."""
    data = write_dataset(tmp_path / "data")
    args = train_args(tiny_model, data, tmp_path / "adapter")
    preview = agent.run(*args)
    raw = bytearray((data / "valid.jsonl").read_bytes())
    raw[10] ^= 0x01
    (data / "valid.jsonl").write_bytes(bytes(raw))
    result = agent.run(*args, "--confirm", "--preview-hash", preview.data["plan"]["preview_hash"])
    assert result.rc == 1 and result.code == "preview_stale"
    changes = result.doc["error"]["details"]["changes"]
    assert [c["field"] for c in changes] == ["dataset.files[valid.jsonl].sha256"]
    old = {f["name"]: f for f in preview.data["plan"]["dataset"]["files"]}["valid.jsonl"]["sha256"]
    assert changes[0]["old"] == old
    assert not (tmp_path / "adapter").exists()


def test_stale_hash_after_a_hyperparameter_changes(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """Confirming a different --iters than was previewed is preview_stale with that field."""
    data = write_dataset(tmp_path / "data")
    preview = agent.run(*train_args(tiny_model, data, tmp_path / "adapter"))
    args = train_args(tiny_model, data, tmp_path / "adapter")
    args[args.index("--iters") + 1] = "4"
    result = agent.run(*args, "--confirm", "--preview-hash", preview.data["plan"]["preview_hash"])
    assert result.code == "preview_stale"
    fields = {c["field"] for c in result.doc["error"]["details"]["changes"]}
    assert "hyperparameters.iters" in fields


def test_status_without_trainings(agent: Agent) -> None:
    """Status with no receipts is an empty list."""
    result = agent.run("lora", "status")
    assert result.rc == 0 and result.doc["operation"] == "lora.status" and result.data["trainings"] == []


def test_status_of_a_missing_or_foreign_receipt(agent: Agent, tmp_path: Path) -> None:
    """--receipt naming nothing is receipt_not_found; naming a serve receipt is receipt_corrupt."""
    missing = agent.run("lora", "status", "--receipt", str(tmp_path / "none.json"))
    assert missing.rc == 1 and missing.code == "receipt_not_found"
    serve = tmp_path / "8080.json"
    serve.write_text(json.dumps({"format_version": "1.0", "kind": "serve", "state": "x", "plan": {}}))
    foreign = agent.run("lora", "status", "--receipt", str(serve))
    assert foreign.rc == 1 and foreign.code == "receipt_corrupt"


def test_status_lists_an_unreadable_receipt(agent: Agent) -> None:
    """A corrupt file among the receipts is listed as unreadable, not a crash."""
    directory = agent.home / "receipts" / "train"
    directory.mkdir(parents=True)
    (directory / "0123456789abcdef.json").write_text("{oops")
    result = agent.run("lora", "status")
    assert result.rc == 0
    entry = result.data["trainings"][0]
    assert entry["state"] == "unreadable" and entry["error"]["code"] == "receipt_corrupt"
    assert_status_entry(entry)


def test_human_preview_prints_the_confirm_command(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """Without --json the plan is a table and the line to paste confirms exactly this plan."""
    data = write_dataset(tmp_path / "data")
    proc = subprocess.run(
        [sys.executable, str(LAUNCHER), *train_args(tiny_model, data, tmp_path / "adapter")],
        capture_output=True,
        text=True,
        env={**agent.env, "COLUMNS": "300"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "lora train: plan (nothing started)" in proc.stdout
    assert "--confirm --preview-hash" in proc.stdout.replace("\n", " ")


def test_training_receipt_is_not_an_option_of_lora_train(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """`lora train --training-receipt` (once accepted and ignored) is a usage error naming the option."""
    data = write_dataset(tmp_path / "data")
    result = agent.run(*train_args(tiny_model, data, tmp_path / "adapter"), "--training-receipt", "/r.json")
    assert (result.rc, result.code) == (2, "invalid_arguments")
    assert "--training-receipt" in result.doc["error"]["message"]


# Every training option at a value that is not its default: the value typed, and what mlx_lm must train with.
EVERY_OPTION: dict[str, tuple[str | None, object]] = {
    "--iters": ("7", 7),
    "--batch-size": ("3", 3),
    "--learning-rate": ("0.0003", 3e-4),
    "--num-layers": ("1", 1),
    "--rank": ("4", 4),
    "--scale": ("10.5", 10.5),
    "--dropout": ("0.05", 0.05),
    "--fine-tune-type": ("dora", "dora"),
    "--max-seq-length": ("512", 512),
    "--seed": ("11", 11),
    "--steps-per-report": ("2", 2),
    "--steps-per-eval": ("5", 5),
    "--val-batches": ("2", 2),
    "--save-every": ("3", 3),
    "--mask-prompt": (None, True),  # a flag: present means true
}
LORA_PARAMETERS = ("--rank", "--scale", "--dropout")  # mlx_lm takes these from the -c file only


def test_every_training_option_reaches_mlx_lm_from_the_command_line(
    agent: Agent, tiny_model: Path, tmp_path: Path
) -> None:
    """Each lora train option typed on the CLI is what mlx_lm's own parser and config merge train with."""
    import importlib
    from typing import Any

    from mlx_agent.plan.requests import TrainRequest

    inputs = {"--path", "--repo", "--data", "--adapter-path", "--receipts-dir"}
    assert {opt.flag for opt in TrainRequest.OPTIONS} - inputs == set(EVERY_OPTION)  # a new option is tested here
    defaults = {opt.flag: opt.default for opt in TrainRequest.OPTIONS}
    assert all(defaults[flag] != value for flag, (_, value) in EVERY_OPTION.items())  # none is left as it was
    chat = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.jsonl", "valid.jsonl"):
        (data / name).write_text((chat + "\n") * 4)  # chat records: --mask-prompt applies
    typed = [word for flag, (text, _) in EVERY_OPTION.items() for word in (flag, text) if word is not None]
    args = ["lora", "train", "--path", str(tiny_model), "--data", str(data), "--adapter-path", str(tmp_path / "a")]
    result = agent.run(*args, *typed)
    assert result.rc == 0, result.stdout + result.stderr
    plan = result.data["plan"]
    lora: Any = importlib.import_module("mlx_lm.lora")
    yaml: Any = importlib.import_module("yaml")
    assert plan["argv"][1:4] == ["-m", "mlx_lm", "lora"]
    resolved = dict(vars(lora.build_parser().parse_args(plan["argv"][4:])))
    for key, value in yaml.load(json.dumps(plan["config"]), lora.yaml_loader).items():  # as mlx_lm's main merges
        if resolved.get(key) is None:
            resolved[key] = value
    for flag, (_, value) in EVERY_OPTION.items():
        name = flag.removeprefix("--").replace("-", "_")
        got = resolved["lora_parameters"][name] if flag in LORA_PARAMETERS else resolved[name]
        assert (got, plan["hyperparameters"][name]) == (value, value), flag
