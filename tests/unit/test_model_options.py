"""Every per-model option round-trips: the command line and a [[model]] table give the same record and plan."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.cli.app import serve
from mlx_agent.cli.fast import parse
from mlx_agent.errors import InvalidArguments, MlxAgentError
from mlx_agent.plan.options import Opt
from mlx_agent.plan.requests import COMMANDS, ModelRequest, ServeRequest
from mlx_agent.plan.serve_plan import build_serve_plan
from mlx_agent.plan.source import resolve_path_source
from mlx_agent.records.plan import ModelPlan
from tests.adapter_support import make_adapter
from tests.conftest import REPO_ROOT
from tests.fixtures.tiny_model import build_hf_cache_repo, build_tiny_model
from tests.plan_support import native_executable

PORT = 18997
NAME = "m"  # every case names its model: a table must
OPTIONS = {opt.dest: opt for opt in ModelRequest.OPTIONS}
LOCAL_PAIR = ("127.0.0.1", "127.0.0.1")
VLM = {"path": "@vlm", "runtime": "mlx-vlm"}  # mlx-vlm's own options: its recipe has their capabilities


@dataclass
class Case:
    """Values of one option (and what it needs beside it), and whether a front must be JIT for them."""

    option: str
    values: dict[str, Any]
    jit: bool = False
    refused: str | None = None  # the error code both ways give, where this machine cannot plan it
    needs: dict[str, str] = field(default_factory=dict)  # value -> fixture path key, filled in by the test


# One case per option of ModelRequest; test_every_option_has_a_case fails for an option added without one.
CASES = [
    Case("path", {"path": "@model"}),
    Case("repo", {"repo": "org/tiny"}),
    Case("training_receipt", {"training_receipt": "@receipt"}),
    Case("adapter_path", {"path": "@model", "adapter_path": "@adapter"}),
    Case("runtime", {"path": "@model", "runtime": "auto"}),
    Case("runtime_executable", {"path": "@model", "runtime_executable": "@executable"}),
    Case("served_model_name", {"path": "@model", "served_model_name": "other"}),
    Case("alias", {"path": "@model", "alias": ("claude-*", "gpt-4o")}),
    Case("thinking", {"path": "@model", "thinking": "off"}),
    Case("thinking_budget", {**VLM, "thinking_budget": 64}),
    Case("chat_template_args", {"path": "@model", "chat_template_args": '{"reasoning_effort": "low"}'}),
    Case("chat_template", {"path": "@model", "chat_template": "@template"}),
    Case("tool_parser", {"path": "@model", "tool_parser": "json_tools"}),
    Case("prompt_lookup", {"path": "@model", "prompt_lookup": True}),
    Case("m5_prefill", {"path": "@model", "m5_prefill": True}),
    Case("prompt_cache_disk_gb", {"path": "@model", "prompt_cache_disk_gb": 1.5}),
    Case("verify_weights", {"path": "@model", "verify_weights": True}),
    Case("draft_model", {"path": "@model", "draft_model": "@draft"}),
    Case("num_draft_tokens", {"path": "@model", "draft_model": "@draft", "num_draft_tokens": 3}),
    Case("draft_kind", {**VLM, "draft_model": "@vlm", "draft_kind": "mtp"}),
    Case("kv_bits", {"path": "@model", "kv_bits": 4}),
    Case("kv_group_size", {"path": "@model", "kv_bits": 4, "kv_group_size": 32}),
    Case("kv_quant_scheme", {**VLM, "kv_bits": 3.5, "kv_quant_scheme": "turboquant"}),
    Case("max_kv_size", {**VLM, "max_kv_size": 512}),
    Case("vision_cache_size", {**VLM, "vision_cache_size": 3}),
    Case("prefix_cache_gb", {**VLM, "prefix_cache_gb": 2.5}),
    Case("trust_remote_code", {"path": "@model", "trust_remote_code": True}, refused="trust_remote_code_refused"),
    Case("hosts", {"path": "@model", "hosts": LOCAL_PAIR}),
    Case("hostfile", {"path": "@model", "hostfile": "@hostfile"}),
    Case("backend", {"path": "@model", "hosts": LOCAL_PAIR, "backend": "jaccl"}, refused="distributed_unsupported"),
    Case("pipeline", {"path": "@model", "hosts": LOCAL_PAIR, "pipeline": True}, refused="distributed_unsupported"),
    Case("ring_port", {"path": "@model", "hosts": LOCAL_PAIR, "ring_port": 40000}),
    Case("max_tokens", {"path": "@model", "max_tokens": 64}),
    Case("max_tokens_ceiling", {"path": "@model", "max_tokens_ceiling": 128}),
    Case("decode_concurrency", {"path": "@model", "decode_concurrency": 4}),
    Case("reasoning_budget", {"path": "@model", "reasoning_budget": 256}),
    Case("hedge_limit", {"path": "@model", "hedge_limit": 0}),
    Case("repeat_limit", {"path": "@model", "repeat_limit": 5}),
    Case("limit_answers", {"path": "@model", "limit_answers": True}),
    Case("idle_timeout", {"path": "@model", "idle_timeout": 30.0}, jit=True),
    Case("keep_loaded", {"path": "@model", "keep_loaded": True}, jit=True),
    Case("preload", {"path": "@model", "preload": True}, jit=True),
]


@pytest.fixture(scope="module")
def files(tiny_model: Path, tiny_vlm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Return the paths the cases name: the models, a draft, an adapter, a training receipt, a runtime, hosts."""
    root = tmp_path_factory.mktemp("options")
    adapter = make_adapter(root / "adapter")
    trained = make_adapter(root / "trained")
    base = resolve_path_source(str(tiny_model))[0]
    receipt = {
        "format_version": "1.0",
        "kind": "train",
        "id": "0" * 16,
        "state": "completed",
        "exit_code": 0,
        "plan": {"base": base, "adapter_path": str(trained)},
        "base": base,
        "adapter": {
            "path": str(trained),
            "files": {
                p.name: {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "size": p.stat().st_size}
                for p in sorted(trained.iterdir())
            },
        },
    }
    (root / "receipt.json").write_text(json.dumps(receipt))
    (root / "hosts.json").write_text(json.dumps([{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2))
    build_hf_cache_repo(root / "hf", "org/tiny", tiny_model)
    template = root / "chat_template.jinja"
    template.write_text((REPO_ROOT / "tests" / "templates" / "Qwen3-Coder.jinja").read_text(encoding="utf-8"))
    return {
        "@model": str(tiny_model),
        "@vlm": str(tiny_vlm),
        "@draft": str(build_tiny_model(root / "draft", seed=7, num_layers=1)),
        "@adapter": str(adapter),
        "@receipt": str(root / "receipt.json"),
        "@executable": str(native_executable(root)),
        "@hostfile": str(root / "hosts.json"),
        "@hf": str(root / "hf"),
        "@template": str(template),
    }


@pytest.fixture(autouse=True)
def hf_cache(files: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the Hugging Face cache at the one holding org/tiny."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", files["@hf"])


def filled(case: Case, files: dict[str, str]) -> dict[str, Any]:
    """Return the case's values with its fixture paths filled in, named as every table must be."""
    values = {"served_model_name": NAME, **case.values}
    return {k: files.get(v, v) if isinstance(v, str) else v for k, v in values.items()}


def argv_word(opt: Opt, value: Any) -> list[str]:
    """Return the command-line words giving ``value`` to ``opt``."""
    if opt.kind == "flag":
        return [opt.flag] if value else []
    if opt.kind == "multi":
        return [word for item in value for word in (opt.flag, item)]
    if opt.kind == "list":
        return [opt.flag, ",".join(value)]
    return [opt.flag, str(value)]


def toml_value(value: Any) -> str:
    """Return ``value`` as TOML (JSON's strings, numbers, booleans and arrays are TOML's too)."""
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def cli_request(values: dict[str, Any], tmp_path: Path, *, jit: bool, models: Path | None = None) -> ServeRequest:
    """Parse the command line giving ``values`` with Click and with the fast path; they must agree."""
    argv = ["--port", str(PORT), "--receipts-dir", str(tmp_path / "receipts"), *(["--jit"] if jit else [])]
    if models is not None:
        argv += ["--models", str(models)]
    for dest, value in values.items():
        argv += argv_word(OPTIONS[dest], value)
    fast = parse(["serve", "start", *argv, "--json"])
    assert fast is not None, argv
    context = serve.commands["start"].make_context("start", [*argv, "--json"])
    clicked, _ = COMMANDS[("serve", "start")].parse(context.params)
    assert clicked.values() == fast[1].values()
    assert isinstance(clicked, ServeRequest)
    return clicked


def file_request(values: dict[str, Any], tmp_path: Path, *, jit: bool) -> ServeRequest:
    """Write ``values`` as one [[model]] table (options given once for all stay on the command line)."""
    lines = ["[[model]]"]
    given = {}
    for dest, value in values.items():
        opt = OPTIONS[dest]
        if opt.scope == "cli":
            given[dest] = value
        elif opt.kind == "json":
            pairs = ", ".join(f"{k} = {toml_value(v)}" for k, v in json.loads(value).items())
            lines.append(f"{dest} = {{ {pairs} }}")
        else:
            lines.append(f"{dest} = {toml_value(value)}")
    path = tmp_path / "models.toml"
    path.write_text("\n".join(lines) + "\n")
    return cli_request(given, tmp_path, jit=jit, models=path)


def model_of(req: ServeRequest) -> ModelPlan:
    """Return the plan's one model."""
    plan = build_serve_plan(req)
    assert len(plan["models"]) == 1
    return plan["models"][0]


def outcome(req: ServeRequest) -> ModelPlan | str:
    """Return the plan's one model, or the code of the error it is refused with."""
    try:
        return model_of(req)
    except MlxAgentError as exc:
        return exc.code


def test_every_option_has_a_case() -> None:
    """Each per-model option is exercised below: adding one to ModelRequest without a case fails here."""
    assert [case.option for case in CASES] == [opt.dest for opt in ModelRequest.OPTIONS]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.option)
def test_an_option_means_the_same_on_the_command_line_and_in_a_table(
    case: Case, files: dict[str, str], tmp_path: Path
) -> None:
    """Both ways give the same model plan, unlike the plan without the option: the option reached the plan."""
    values = filled(case, files)
    served = {key: values[key] for key in ("path", "runtime")} if values.get("runtime") == VLM["runtime"] else {}
    baseline = {"served_model_name": NAME, "path": files["@model"], **served}  # the same model and runtime
    from_file = outcome(file_request(values, tmp_path, jit=case.jit))
    if OPTIONS[case.option].scope != "file":  # a table-only option has no flag to compare with
        assert outcome(cli_request(values, tmp_path, jit=case.jit)) == from_file
    if case.refused is not None:
        assert from_file == case.refused
        without = {k: v for k, v in values.items() if k != case.option}
        assert not isinstance(outcome(file_request(without, tmp_path, jit=case.jit)), str)
        return
    assert not isinstance(from_file, str), from_file
    if case.option != "path":
        assert from_file != model_of(file_request(baseline, tmp_path, jit=case.jit))
    else:
        assert from_file["source"]["path"] == files["@model"]


@pytest.mark.parametrize("case", [c for c in CASES if OPTIONS[c.option].scope == "both"], ids=lambda c: c.option)
def test_a_model_option_beside_a_models_file_is_refused(case: Case, files: dict[str, str], tmp_path: Path) -> None:
    """Every option a table takes is refused on the command line beside --models, naming its flag."""
    path = tmp_path / "models.toml"
    path.write_text(f'[[model]]\nserved_model_name = "{NAME}"\npath = "{files["@model"]}"\n')
    value = filled(case, files)[case.option]
    with pytest.raises(InvalidArguments) as caught:
        build_serve_plan(ServeRequest(models=str(path), port=PORT, jit=case.jit, **{case.option: value}))
    assert OPTIONS[case.option].flag in caught.value.details["options"]


def test_a_group_hostfile_lives_beside_the_receipt(files: dict[str, str], tmp_path: Path) -> None:
    """A group's reviewed host list is private to its port, in the receipts directory, never at the root."""
    values = {"path": files["@model"], "hosts": LOCAL_PAIR}
    group = model_of(cli_request(values, tmp_path, jit=False))["group"]
    assert group is not None
    assert group["hostfile_path"] == str(tmp_path / "receipts" / "serve" / f"{PORT}.worker.hosts.json")
