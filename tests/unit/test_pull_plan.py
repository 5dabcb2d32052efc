"""The pure plan of ``mlx-agent pull``: which files of a Hub listing are fetched, their identity, the disk rule."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.canonical import plan_hash
from mlx_agent.disk import MIB, DiskSpace
from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import HubUnreachable, NotEnoughDisk
from mlx_agent.plan import pull
from mlx_agent.plan.pull_records import PullPlan

pytestmark = pytest.mark.fast

COMMIT = "a" * 40


def sibling(name: str, data: bytes, lfs: bool | None = None) -> dict[str, Any]:
    """Return one file of a listing as ``supervise/hub.listing`` gives it (LFS for weights unless told)."""
    in_lfs = name.endswith(".safetensors") if lfs is None else lfs
    return {
        "name": name,
        "size": len(data),
        "blob_id": hashlib.sha1(data, usedforsecurity=False).hexdigest(),
        "sha256": hashlib.sha256(data).hexdigest() if in_lfs else None,
    }


LISTING = [
    sibling("model.safetensors", b"W" * 1000),
    sibling("config.json", b'{"model_type": "llama"}'),
    sibling("tokenizer.json", b"{}"),
    sibling("chat_template.jinja", b"{{ messages }}"),
    sibling("modeling_llama.py", b"import os"),
    sibling("pytorch_model.bin", b"pickle"),
    sibling("README.md", b"# hi"),
]


def plan_of(listing: list[dict[str, Any]], cache: Path = Path("/cache")) -> PullPlan:
    """Return the plan of pulling org/m at main from ``listing``."""
    return pull.pull_plan("org/m", "main", COMMIT, "http://hub", cache, listing)


@pytest.mark.parametrize(
    ("name", "role", "reason"),
    [
        ("model-00001-of-00002.safetensors", "weights", None),
        ("model.safetensors.index.json", "weight_index", None),
        ("generation_config.json", "config", None),
        ("tokenizer.model", "tokenizer", None),
        ("chat_template.json", "template", None),
        ("preprocessor_config.json", "processor", None),
        ("modeling_x.py", None, "code"),
        ("pytorch_model.bin", None, "pickle"),
        ("model-q4.gguf", None, "gguf"),
        ("onnx/model.onnx", None, "onnx"),
        ("flax_model.msgpack", None, "other_format"),
        (".gitattributes", None, "hidden"),
        ("../escape.safetensors", None, "hidden"),
        ("original/model.safetensors", None, "subfolder"),
        ("README.md", None, "not_needed"),
    ],
)
def test_each_file_is_fetched_for_its_role_or_left_out_with_why(
    name: str, role: str | None, reason: str | None
) -> None:
    """Serving's files are fetched by role; code, pickles, other formats, hidden and nested files are left out."""
    assert pull.role(name) == role
    if reason is not None:
        assert pull.skip_reason(name) == reason and reason in pull.SKIP_REASONS


def test_the_plan_binds_each_file_and_does_not_depend_on_the_listing_order() -> None:
    """LFS files are bound by sha256, others by git blob id; the hash is the same whatever order the Hub lists."""
    plan = plan_of(LISTING)
    assert [f["name"] for f in plan["files"]] == [
        "chat_template.jinja",
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    weights = next(f for f in plan["files"] if f["role"] == "weights")
    assert weights["blob"] == weights["sha256"] == hashlib.sha256(b"W" * 1000).hexdigest()
    config = next(f for f in plan["files"] if f["role"] == "config")
    assert (config["blob"], config["sha256"]) == (config["git_sha1"], None)
    assert plan["total_bytes"] == sum(f["size"] for f in plan["files"])
    assert {s["name"]: s["reason"] for s in plan["skipped"]} == {
        "modeling_llama.py": "code",
        "pytorch_model.bin": "pickle",
        "README.md": "not_needed",
    }
    assert plan["snapshot"] == f"/cache/models--org--m/snapshots/{COMMIT}"
    assert plan_hash(plan) == plan_hash(plan_of(list(reversed(LISTING))))
    assert plan_hash(plan) != plan_hash(
        pull.pull_plan("org/m", "main", "b" * 40, "http://hub", Path("/cache"), LISTING)
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"blob_id": "../../../etc/passwd"},
        {"sha256": "../x"},
        {"size": None},
    ],
)
def test_a_listing_whose_ids_could_not_name_a_blob_is_refused(bad: dict[str, Any]) -> None:
    """A blob id, sha256 or size that is not what the Hub gives (a blob's file name comes from them) is refused."""
    with pytest.raises(HubUnreachable):
        plan_of([{**sibling("model.safetensors", b"W"), **bad}])
    with pytest.raises(HubUnreachable):
        pull.pull_plan("org/m", "main", "../main", "http://hub", Path("/cache"), [])


@pytest.mark.parametrize(
    ("repo", "revision", "ok"),
    [
        ("org/m", "main", True),
        ("org/m", "refs/pr/1", True),
        ("org/m", "v1.0", True),
        ("org/m", COMMIT, True),
        ("m", "main", False),
        ("org/a..b", "main", False),
        ("org/m", "../main", False),
        ("org/m", "a/../../b", False),
    ],
)
def test_the_repo_and_revision_are_checked_before_the_hub_is_asked(repo: str, revision: str, ok: bool) -> None:
    """A repo id not ORG/NAME or a revision with ``..`` is a usage error (exit 2)."""
    if ok:
        pull.check_request(repo, revision)
    else:
        with pytest.raises(InvalidArguments):
            pull.check_request(repo, revision)


def test_the_disk_counts_what_the_cache_holds_and_keeps_the_floor(tmp_path: Path) -> None:
    """Blobs already present (by name and size) are not fetched again; the rest must leave the floor free."""
    plan = plan_of(LISTING, tmp_path)
    blobs = tmp_path / "models--org--m" / "blobs"
    blobs.mkdir(parents=True)
    weights = next(f for f in plan["files"] if f["role"] == "weights")
    config = next(f for f in plan["files"] if f["role"] == "config")
    (blobs / weights["blob"]).write_bytes(b"W" * weights["size"])
    (blobs / config["blob"]).write_bytes(b"short")  # a blob of another size is not the file
    assert pull.present(plan) == ["model.safetensors"]
    fetch = plan["total_bytes"] - weights["size"]
    roomy = pull.disk_record(plan, DiskSpace(str(tmp_path), 8 * MIB + fetch, 100 * MIB, 1))
    assert (roomy["present_bytes"], roomy["fetch_bytes"], roomy["fits"]) == (weights["size"], fetch, True)
    pull.check_disk(roomy)
    short = pull.disk_record(plan, DiskSpace(str(tmp_path), 8 * MIB + fetch - 1, 100 * MIB, 1))
    assert short["fits"] is False
    with pytest.raises(NotEnoughDisk) as refused:
        pull.check_disk(short)
    assert refused.value.details["fetch_bytes"] == fetch
    unknown = pull.disk_record(plan, None)
    assert unknown["fits"] is None
    pull.check_disk(unknown)  # a free space that cannot be read is not a refusal
    warned = pull.preview_warnings(short, {"problem": None, "runtime_problem": None, "memory": {"fits": None}})  # type: ignore[typeddict-item]
    assert len(warned) == 1 and warned[0].startswith("not_enough_disk")


def test_code_is_fetched_only_when_allowed_and_is_bound_like_every_file() -> None:
    """With allow_code a top-level .py file is fetched (role code, git blob id bound) and the plan's hash differs."""
    assert pull.role("modeling_x.py") is None and pull.role("modeling_x.py", allow_code=True) == "code"
    assert pull.role("sub/modeling_x.py", allow_code=True) is None
    allowed = pull.pull_plan("org/m", "main", COMMIT, "http://hub", Path("/cache"), LISTING, allow_code=True)
    [code] = [f for f in allowed["files"] if f["role"] == "code"]
    assert (code["name"], code["git_sha1"]) == ("modeling_llama.py", hashlib.sha1(b"import os").hexdigest())
    assert "modeling_llama.py" not in {s["name"] for s in allowed["skipped"]}
    assert plan_hash(allowed) != plan_hash(plan_of(LISTING))
