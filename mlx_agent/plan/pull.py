"""The plan of ``mlx-agent pull ORG/NAME``: which files of the repo at which commit, and what they would make here.

Pure: the Hub's listing comes in as plain records (``supervise/hub.py`` asks for it), and only the cache's
blobs and the small metadata files fetched for the preview are read. A file is fetched when serving needs it
(weights, their index, config, tokenizer, chat template, image processor); everything else stays on the Hub
and is listed with why; a model's own code (``*.py``) only with ``--allow-code``, bound by its hash like every
other file (mlx-agent never runs it; a runtime asked to trust remote code would).
"""

from __future__ import annotations

import re
from pathlib import Path

from mlx_agent.errors import InvalidArguments, MlxAgentError
from mlx_agent.errors.commands import HubUnreachable, ModelNotLocal, NotEnoughDisk
from mlx_agent.plan.source import REPO_ID
from mlx_agent.wire import PULL_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from mlx_agent.disk import DiskSpace
    from mlx_agent.plan.catalog import Runtimes
    from mlx_agent.plan.pull_records import PullDisk, PullFile, PullPlan, Role, Servable, SkippedFile

COMMIT = re.compile(r"^[0-9a-f]{40}$")  # a git commit or blob id
SHA256 = re.compile(r"^[0-9a-f]{64}$")
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")  # a branch, tag or commit; no "..", checked below
FETCHED: dict[str, Role] = {
    "config.json": "config",
    "generation_config.json": "config",
    "tokenizer.json": "tokenizer",
    "tokenizer.model": "tokenizer",
    "tokenizer_config.json": "tokenizer",
    "vocab.json": "tokenizer",
    "merges.txt": "tokenizer",
    "special_tokens_map.json": "tokenizer",
    "added_tokens.json": "tokenizer",
    "chat_template.jinja": "template",
    "chat_template.json": "template",
    "preprocessor_config.json": "processor",
    "processor_config.json": "processor",
    "video_preprocessor_config.json": "processor",
}
# The preview fetches these to say what the model would be (runtime, kind, completeness); all are small.
METADATA = ("config.json", "model.safetensors.index.json")
SKIPPED_SUFFIXES: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".py",), "code"),
    ((".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"), "pickle"),
    ((".gguf",), "gguf"),
    ((".onnx", ".onnx_data"), "onnx"),
    ((".h5", ".msgpack", ".tflite", ".ot", ".mlmodel", ".npz"), "other_format"),
)
SKIP_REASONS = {
    "code": "model code: fetched only with --allow-code (mlx-agent never runs a model's own code)",
    "pickle": "a pickle (PyTorch) file: loading one can run code, and MLX reads .safetensors",
    "gguf": "a GGUF file: llama.cpp's format, not MLX's",
    "onnx": "an ONNX file: not read by MLX",
    "other_format": "another framework's weights: not read by MLX",
    "hidden": "a hidden file: not part of the model",
    "subfolder": "in a subfolder: mlx_lm and mlx_vlm read a model's top folder only",
    "not_needed": "not needed to serve the model",
}


def check_request(repo: str, revision: str) -> None:
    """Refuse a repo id or revision that could not name a repo on the Hub (or would escape the cache's folders)."""
    if not REPO_ID.match(repo) or ".." in repo:
        raise InvalidArguments(f"{repo!r} is not of the form ORG/NAME", details={"repo": repo})
    if not REVISION.match(revision) or ".." in revision.split("/"):
        raise InvalidArguments(
            f"--revision {revision!r} is not a branch, tag or commit", details={"revision": revision}
        )


def role(name: str, allow_code: bool = False) -> Role | None:
    """Return what a file of the repo is for serving, or None when the pull leaves it on the Hub.

    Only files of the repo's top folder are fetched, so no name from the Hub's listing makes a path of its own.
    """
    if "/" in name or "\\" in name or name.startswith("."):
        return None
    if name in FETCHED:
        return FETCHED[name]
    if name.endswith(".safetensors.index.json"):
        return "weight_index"
    if name.endswith(".safetensors"):
        return "weights"
    if allow_code and name.endswith(".py"):
        return "code"
    return None


def skip_reason(name: str) -> str:
    """Return why a file the pull does not fetch is left out (a key of ``SKIP_REASONS``)."""
    base = name.rsplit("/", 1)[-1]
    if any(part.startswith(".") for part in name.split("/")):
        return "hidden"
    for suffixes, reason in SKIPPED_SUFFIXES:
        if base.lower().endswith(suffixes):
            return reason
    return "subfolder" if "/" in name else "not_needed"


def _hub_file(name: str, kind: Role, sibling: Mapping[str, Any]) -> PullFile:
    size, blob_id, sha256 = sibling.get("size"), sibling.get("blob_id"), sibling.get("sha256")
    if sha256 is not None and not (isinstance(sha256, str) and SHA256.match(sha256)):
        sha256 = ""  # refused below: a blob's name comes from it
    if (
        not isinstance(size, int)
        or size < 0
        or not isinstance(blob_id, str)
        or not COMMIT.match(blob_id)
        or sha256 == ""
    ):
        raise HubUnreachable(
            f"the Hub's listing of {name} lacks a size, a git blob id or a valid sha256", details={"file": name}
        )
    return {
        "name": name,
        "role": kind,
        "size": size,
        "blob": sha256 if isinstance(sha256, str) else blob_id,
        "sha256": sha256 if isinstance(sha256, str) else None,
        "git_sha1": None if isinstance(sha256, str) else blob_id,
    }


def pull_plan(
    repo: str,
    revision: str,
    commit: str,
    endpoint: str,
    cache_dir: Path,
    siblings: Sequence[Mapping[str, Any]],
    allow_code: bool = False,
) -> PullPlan:
    """Return the plan of fetching ``repo`` at ``commit`` (what ``revision`` resolved to) into ``cache_dir``.

    ``siblings`` are the Hub's files of that commit: ``name``, ``size``, ``blob_id`` and, for LFS files,
    ``sha256``. Files come sorted by name, so the plan (and its hash) does not depend on the Hub's order.
    """
    if not COMMIT.match(commit):
        raise HubUnreachable(f"the Hub named {commit!r} as the commit of {revision}, not a commit id", details={})
    files: list[PullFile] = []
    skipped: list[SkippedFile] = []
    for sibling in sorted(siblings, key=lambda s: str(s["name"])):
        name = str(sibling["name"])
        kind = role(name, allow_code)
        if kind is None:
            size = sibling.get("size")
            skipped.append({"name": name, "size": size if isinstance(size, int) else None, "reason": skip_reason(name)})  # type: ignore[typeddict-item]  # a key of SKIP_REASONS
        else:
            files.append(_hub_file(name, kind, sibling))
    repo_dir = cache_dir / ("models--" + repo.replace("/", "--"))
    return {
        "format_version": PULL_VERSION,
        "operation": "pull",
        "endpoint": endpoint,
        "repo": repo,
        "revision": revision,
        "commit": commit,
        "cache_dir": str(cache_dir),
        "snapshot": str(repo_dir / "snapshots" / commit),
        "files": files,
        "skipped": skipped,
        "total_bytes": sum(f["size"] for f in files),
    }


def blobs_dir(plan: Mapping[str, Any]) -> Path:
    """Return the cache's blobs folder of the plan's repo."""
    return Path(plan["snapshot"]).parent.parent / "blobs"


def present(plan: PullPlan) -> list[str]:
    """Return the plan's files whose blob the cache already holds, by name (the content hash) and size."""
    blobs = blobs_dir(plan)
    held = []
    for f in plan["files"]:
        try:
            if (blobs / f["blob"]).stat().st_size == f["size"]:
                held.append(f["name"])
        except OSError:
            continue
    return held


def disk_record(plan: PullPlan, space: DiskSpace | None) -> PullDisk:
    """Return the room for the fetch: ``fits`` when what is missing leaves the disk at or above its floor."""
    from mlx_agent.disk import room_for

    held = set(present(plan))
    present_bytes = sum(f["size"] for f in plan["files"] if f["name"] in held)
    fetch = plan["total_bytes"] - present_bytes
    return {
        "path": plan["cache_dir"],
        "free_bytes": None if space is None else space.free_bytes,
        "floor_bytes": None if space is None else space.floor_bytes,
        "present_bytes": present_bytes,
        "fetch_bytes": fetch,
        "fits": None if space is None else room_for(space.free_bytes, space.floor_bytes, fetch),
    }


def check_disk(disk: PullDisk) -> None:
    """Refuse a fetch that would take the cache's disk under its floor (unknown free space is not refused)."""
    if disk["fits"] is False:
        raise NotEnoughDisk(
            f"fetching {disk['fetch_bytes']} bytes would leave {disk['path']} under its floor of "
            f"{disk['floor_bytes']} bytes free (it has {disk['free_bytes']})",
            details={k: disk[k] for k in ("path", "free_bytes", "floor_bytes", "fetch_bytes")},
        )


def servable(plan: PullPlan, meta_dir: Path, runtimes: Runtimes, available: int | None) -> Servable:
    """Say what ``serve start --runtime auto`` would make of the fetched files, by the catalog's rules.

    ``meta_dir`` holds the plan's ``METADATA`` files fetched for the preview. The weights are not there, so
    their bytes are the Hub's sizes of the .safetensors files (their headers, a few kB, count too).
    """
    from mlx_agent.plan.catalog import describe, memory_of, runtime_of
    from mlx_agent.plan.source import check_complete, needs_tokenizer, read_config

    names = [f["name"] for f in plan["files"]]
    weights = [f["size"] for f in plan["files"] if f["role"] == "weights"]
    record: Servable = {
        "problem": None,
        "runtime": None,
        "kind": None,
        "runtime_reason": None,
        "runtime_problem": None,
        "quantization": None,
        "context_window": None,
        "vision": False,
        "memory": memory_of(sum(weights) if weights else None, available),
    }
    try:
        config = read_config(meta_dir)
        check_complete(meta_dir, names, ModelNotLocal, tokenizer=needs_tokenizer(config))  # a NeMo recogniser has none
    except MlxAgentError as exc:
        record["problem"] = {"code": exc.code, "message": str(exc).replace(str(meta_dir), plan["repo"])}
        return record
    record.update(describe(config))  # type: ignore[typeddict-item]  # the three keys describe fills
    try:
        record["runtime"], record["kind"], record["runtime_reason"] = runtime_of(config, runtimes)
    except MlxAgentError as exc:
        record["runtime_problem"] = {"code": exc.code, "message": str(exc)}
    return record


def preview_warnings(disk: PullDisk, serving: Servable) -> list[str]:
    """Return what a reviewer should know before confirming: the disk is short, or the model would not serve."""
    warnings = []
    if disk["fits"] is False:
        warnings.append(
            f"not_enough_disk: {disk['fetch_bytes']} bytes to fetch and {disk['free_bytes']} free at {disk['path']} "
            f"(floor {disk['floor_bytes']}): the confirm is refused until space is freed"
        )
    for problem in (serving["problem"], serving["runtime_problem"]):
        if problem is not None:
            warnings.append(f"{problem['code']}: {problem['message']}: serve start would refuse the fetched model")
    if serving["memory"]["fits"] is False:
        warnings.append("insufficient_headroom: the model would not fit the memory available now")
    return warnings
