"""The worker contract: one record the plan fills whole and the worker parses once; no field without a writer."""

from __future__ import annotations

import ast
import dataclasses
import json

import pytest

from mlx_agent.plan import worker_plan
from mlx_agent.resources import PACKAGE_DIR
from mlx_agent.runtime.serving import socket_limits
from mlx_agent.wire import PROMPT_CACHE_FLAG, SOCKET_FLAG
from mlx_agent.worker_contract import (
    CONTRACT_FLAG,
    ContractInvalid,
    FileCheck,
    ModelCheck,
    WorkerContract,
    contract_argv,
    split_worker_argv,
)
from tests.contract_support import PLAIN, contract

pytestmark = pytest.mark.fast

FIELDS = [f.name for f in dataclasses.fields(WorkerContract)]
FULL = dataclasses.replace(
    PLAIN,
    file_checks=(FileCheck("/a/adapters.safetensors", "a" * 64, 10),),
    chat_template=FileCheck("/t.jinja", "b" * 64, 3),
    model_checks=(ModelCheck("/m/model.safetensors", "header", "c" * 64, 99),),
    tool_parser="json_tools",
    prompt_lookup=True,
    versions={"mlx": "0.32.4", "mlx-metal": None},
    sources={"runtime/x.py": "d" * 64},
    context_window=4096,
    prompt_cache_disk_gb=1.5,
    reasoning_budget=7,
    limit_answers=True,
)


def test_the_contract_crosses_whole_and_leaves_the_runtime_argv_in_order() -> None:
    """What the plan writes is what the worker reads, and mlx_lm's own flags stay its argv, in order."""
    argv = ["--model", "m", SOCKET_FLAG, "/s/w.sock", *contract_argv(FULL), PROMPT_CACHE_FLAG, "/c/id", "--port", "1"]
    given, rest = split_worker_argv(argv)
    assert (given.contract, given.socket, given.prompt_cache_dir) == (FULL, "/s/w.sock", "/c/id")
    assert rest == ["--model", "m", "--port", "1"]


def test_every_field_has_a_writer() -> None:
    """The record has no defaults, so the plan must name each field: a field no plan writes cannot be added."""
    assert [f.name for f in dataclasses.fields(WorkerContract) if f.default is not dataclasses.MISSING] == []
    assert [f.name for f in dataclasses.fields(WorkerContract) if f.default_factory is not dataclasses.MISSING] == []
    written = {
        keyword.arg
        for node in ast.walk(ast.parse((PACKAGE_DIR / "plan" / "worker_plan.py").read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "WorkerContract"
        for keyword in node.keywords
    }
    assert written == set(FIELDS)  # the plan's one writer names each field


def test_every_field_the_worker_reads_is_a_field() -> None:
    """Each ``contract.X`` the worker's code reads is a field of the record (so it has the plan as its writer)."""
    read: set[str] = set()
    for path in sorted((PACKAGE_DIR / "runtime").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute | ast.Name):
                owner = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
                if owner == "contract":
                    read.add(node.attr)
    assert read and read <= set(FIELDS), sorted(read - set(FIELDS))


def test_the_socket_limits_are_the_contract_s() -> None:
    """The worker reads requests under the limits the plan wrote (the front's), not defaults of its own."""
    changed = dataclasses.replace(PLAIN, max_body_bytes=1000, header_timeout=2.0, body_timeout=3.0)
    assert socket_limits.from_contract(changed) == socket_limits.SocketLimits(1000, 2.0, 3.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda doc: doc.pop("hedge_limit"), "lacks"),
        (lambda doc: doc.update(surprise=1), "unknown"),
        (lambda doc: doc.update(repeat_limit=-1), "repeat_limit"),
        (lambda doc: doc.update(reasoning_budget=True), "reasoning_budget"),
        (lambda doc: doc.update(body_timeout=0), "body_timeout"),
        (lambda doc: doc.update(max_body_bytes=0), "max_body_bytes"),
        (lambda doc: doc.update(file_checks=[{"path": "/a", "sha256": "x", "size": 1}]), "file_checks"),
        (lambda doc: doc.update(model_checks=[{"path": "/a", "method": "mtime", "digest": "", "size": 1}]), "model"),
    ],
)
def test_a_contract_that_is_not_the_record_is_refused(change: object, message: str) -> None:
    """A missing, unknown, negative or mistyped field is refused, never read as a default."""
    doc = json.loads(PLAIN.to_json())
    change(doc)  # type: ignore[operator]
    with pytest.raises(ContractInvalid, match=message):
        split_worker_argv([CONTRACT_FLAG, json.dumps(doc)])


def test_exactly_one_contract_and_a_cache_needs_its_disk() -> None:
    """No contract, two, one without a value, or a cache directory with no disk to keep it on, are refused."""
    for argv in ([], [*contract(), *contract()], [CONTRACT_FLAG], [PROMPT_CACHE_FLAG, "/c", *contract()]):
        with pytest.raises(ContractInvalid):
            split_worker_argv(argv)


def test_the_plan_fills_the_reply_limits_only_where_they_apply() -> None:
    """A limit given for a runtime that applies none is refused; the defaults fill what is not given."""
    from mlx_agent.errors.commands import UnsupportedRuntime
    from mlx_agent.plan.recipes import load_recipe
    from mlx_agent.plan.requests import ModelRequest
    from mlx_agent.records.plan import RuntimeRecord

    lm, vlm = load_recipe("mlx_lm")[0], load_recipe("mlx-vlm")[0]
    wrapped: RuntimeRecord = {"launcher": "wrapped"}
    spec = ModelRequest(path="/m", hedge_limit=0, limit_answers=True)
    limits = worker_plan.reply_limits_plan(spec, lm, wrapped)
    assert limits == {"reasoning_budget": 0, "hedge_limit": 0, "repeat_limit": 3, "limit_answers": True}
    assert worker_plan.reply_limits_plan(ModelRequest(path="/m"), vlm, wrapped) is None
    with pytest.raises(UnsupportedRuntime, match="--hedge-limit and --limit-answers"):
        worker_plan.reply_limits_plan(spec, vlm, wrapped)
    with pytest.raises(UnsupportedRuntime):
        worker_plan.reply_limits_plan(spec, lm, {"launcher": "module"})
