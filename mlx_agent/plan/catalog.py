"""Find the models on this machine and say what ``serve start`` would make of each (``mlx-agent models``).

Every row goes through the same code a plan does: ``source.py`` resolves a repo in the Hugging Face cache or a
plain directory (a refusal there is the row's ``problem``), ``runtime_select.py`` picks the runtime as
``--runtime auto`` would (a refusal there is its ``runtime_problem``), ``agent_support.agents_record`` reads the
chat template, and the admission rule of the JIT front estimates the load from the safetensors headers. Only
config.json, tokenizer and template files and the weights' headers are read; no model code is imported.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from mlx_agent.errors import InvalidArguments, MlxAgentError
from mlx_agent.media_kinds import CHAT_KINDS, config_path
from mlx_agent.model_config import context_window, vision_markers
from mlx_agent.plan.source import hf_hub_cache, read_config, resolve_path_source, resolve_repo_source

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.media_kinds import ModelKind
    from mlx_agent.plan.catalog_records import AgentsSummary, Memory, ModelRow, Problem, Quantization
    from mlx_agent.records.plan import Recipe, RuntimeRecord

REPO_PREFIX = "models--"
INDEX = "model.safetensors.index.json"


class Runtimes:
    """The runtime records of one listing, resolved once each (resolving hashes the interpreter and sources)."""

    def __init__(self) -> None:
        self._records: dict[str, RuntimeRecord | MlxAgentError] = {}

    def get(self, name: str) -> tuple[Recipe, RuntimeRecord]:
        """Return a runtime's recipe and record, or raise the refusal resolving it gave."""
        from mlx_agent.plan.recipes import load_recipe
        from mlx_agent.plan.runtime import resolve_runtime

        recipe, sha = load_recipe(name)
        if name not in self._records:
            try:
                self._records[name] = resolve_runtime(name, recipe, sha, None)
            except MlxAgentError as exc:
                self._records[name] = exc
        record = self._records[name]
        if isinstance(record, MlxAgentError):
            raise record
        return recipe, record


def cached_repos(cache: Path) -> list[tuple[str, Path]]:
    """Return each model repo of a Hugging Face cache (``models--ORG--NAME``) as its repo id and folder, sorted."""
    try:
        names = sorted(os.listdir(cache))
    except (FileNotFoundError, NotADirectoryError):
        return []
    repos = []
    for name in names:
        if name.startswith(REPO_PREFIX) and (cache / name).is_dir():
            repos.append((name.removeprefix(REPO_PREFIX).replace("--", "/", 1), cache / name))
    return repos


def model_dirs(given: Path) -> list[Path]:
    """Return the model directories in ``given``: itself if it is one, else its subdirectories that are.

    A model directory holds config.json, or (a diffusers pipeline) ``model_index.json``.
    """
    if config_path(given).is_file():
        return [given]
    try:
        children = sorted(given.iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    return [child for child in children if child.is_dir() and config_path(child).is_file()]


def _problem(exc: MlxAgentError) -> Problem:
    return {"code": exc.code, "message": str(exc)}


def _present(snapshot: Path) -> set[str]:
    """Return the snapshot's files whose content is there (a link to a missing blob is not)."""
    from mlx_agent.identity import list_files

    return {name for name in list_files(snapshot) if (snapshot / name).exists()} if snapshot.is_dir() else set()


def missing_files(repo_dir: Path, revision: str, snapshot: Path) -> list[str]:
    """Return the files a cached snapshot lacks: by the cache's tree listing of the revision, and the weight index."""
    present = _present(snapshot)
    expected: set[str] = set()
    tree = repo_dir / "trees" / f"{revision}.json"
    try:
        listed = json.loads(tree.read_text(encoding="utf-8")).get("files", {})
        expected.update(name for name in listed if isinstance(name, str))
    except (OSError, ValueError, AttributeError):
        pass  # no listing cached: the index and the links still say what is missing
    try:
        weight_map = json.loads((snapshot / INDEX).read_text(encoding="utf-8"))["weight_map"]
        expected.update(v for v in weight_map.values() if isinstance(v, str))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    if snapshot.is_dir():
        expected.update(p.name for p in snapshot.iterdir() if p.is_symlink() and not p.exists())
    return sorted(expected - present)


def _size(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total


def quantization(config: dict[str, Any]) -> Quantization | None:
    """Return the weights' bits and group size from config.json (mlx_lm writes ``quantization``), if quantized."""
    for key in ("quantization", "quantization_config"):
        value = config.get(key)
        if isinstance(value, dict):
            bits, group = value.get("bits"), value.get("group_size")
            return {
                "bits": bits if isinstance(bits, int) and not isinstance(bits, bool) else None,
                "group_size": group if isinstance(group, int) and not isinstance(group, bool) else None,
            }
    return None


def _agents(source: dict[str, Any], runtime: RuntimeRecord, recipe: Recipe, window: int | None) -> AgentsSummary:
    from mlx_agent.plan.agent_support import agents_record
    from mlx_agent.plan.requests import ModelRequest

    predicts = bool(recipe.get("capabilities", {}).get("tool_parser")) and runtime["launcher"] == "wrapped"
    record, _ = agents_record(
        ModelRequest(path=source["path"]), source, runtime, predicts_parser=predicts, window=window
    )
    return {
        "chat_template": record["chat_template"] is not None,
        "renders_tools": record["renders_tools"],
        "render_error": record["render_error"],
        "tool_parser": record["tool_parser"],
        "tool_parser_from": record["tool_parser_from"],
        "thinking": record["thinking"],
    }


def memory_of(weights: int | None, available: int | None) -> Memory:
    """Return the JIT admission's estimate of loading ``weights`` bytes against ``available`` memory."""
    from mlx_agent.load_memory import memory_check

    check = memory_check(weights, 0.0, available)
    estimate = check["required_bytes"]
    return {
        "weight_bytes": weights,
        "estimate_bytes": estimate,
        "available_bytes": available,
        "fits": None if estimate is None or available is None else bool(check["ok"]),
    }


def _memory(source: dict[str, Any], available: int | None) -> Memory:
    from mlx_agent.plan.model_plan import weight_bytes

    try:
        weights = weight_bytes(source, None)  # type: ignore[arg-type]  # a resolved source record
    except (OSError, ValueError, KeyError, TypeError, MlxAgentError):
        weights = None  # an unreadable header: the estimate is unknown, as the front would find it
    return memory_of(weights, available)


def _row(name: str, source_kind: str, repo: str | None, revision: str | None, path: Path | None, size: int) -> ModelRow:
    return {
        "name": name,
        "source": "hf_cache" if source_kind == "hf_cache" else "path",
        "repo": repo,
        "revision": revision,
        "path": None if path is None else str(path),
        "complete": False,
        "missing": [],
        "problem": None,
        "runtime": None,
        "kind": None,
        "runtime_reason": None,
        "runtime_problem": None,
        "size_bytes": size,
        "quantization": None,
        "context_window": None,
        "vision": False,
        "agents": None,
        "memory": None,
        "served": [],
    }


def describe(config: dict[str, Any]) -> dict[str, Any]:
    """Return what config.json alone says: ``quantization``, ``context_window`` and ``vision``."""
    return {
        "quantization": quantization(config),
        "context_window": context_window(config),
        "vision": bool(vision_markers(config)),
    }


def _describe(row: ModelRow, config: dict[str, Any]) -> None:
    """Fill in what config.json alone says (incomplete models too)."""
    row.update(describe(config))  # type: ignore[typeddict-item]  # the three keys describe fills


def runtime_of(config: dict[str, Any], runtimes: Runtimes) -> tuple[str, ModelKind, str]:
    """Return the runtime ``--runtime auto`` picks for ``config``, the model's kind and why; or raise its refusal."""
    from mlx_agent.plan.model_plan import model_kind
    from mlx_agent.plan.runtime_select import select_runtime

    runtime, reason = select_runtime("auto", config, None)
    recipe, _ = runtimes.get(runtime)
    return runtime, model_kind(recipe, config), reason


def _serving(
    row: ModelRow, source: dict[str, Any], config: dict[str, Any], runtimes: Runtimes, free: int | None
) -> None:
    """Fill in what a plan of the complete model would say: its runtime and kind, agents record and memory."""
    row["complete"] = True
    row["memory"] = _memory(source, free)
    try:
        runtime, row["kind"], row["runtime_reason"] = runtime_of(config, runtimes)
        recipe, record = runtimes.get(runtime)
    except MlxAgentError as exc:
        row["runtime_problem"] = _problem(exc)
        return
    row["runtime"] = runtime
    if row["kind"] in CHAT_KINDS:
        row["agents"] = _agents(source, record, recipe, row["context_window"])


def repo_row(repo: str, repo_dir: Path, runtimes: Runtimes, free: int | None) -> ModelRow:
    """Return the row of one repo of the cache, complete or saying what it lacks."""
    ref = repo_dir / "refs" / "main"
    revision = ref.read_text(encoding="utf-8").strip() if ref.is_file() else None
    snapshot = repo_dir / "snapshots" / revision if revision else None
    row = _row(repo, "hf_cache", repo, revision, snapshot, _size(list((repo_dir / "blobs").glob("*"))))
    try:
        source, config = resolve_repo_source(repo)
    except MlxAgentError as exc:
        row["problem"] = _problem(exc)
        if revision is not None and snapshot is not None:
            row["missing"] = missing_files(repo_dir, revision, snapshot)
            with contextlib.suppress(MlxAgentError):  # no config: the problem already says so
                _describe(row, read_config(snapshot))
        return row
    row["size_bytes"] = sum(int(f["size"]) for f in source["files"])
    _describe(row, config)
    _serving(row, source, config, runtimes, free)
    return row


def dir_row(model_dir: Path, runtimes: Runtimes, free: int | None) -> ModelRow:
    """Return the row of one plain model directory."""
    resolved = model_dir.resolve()
    files = [p for p in resolved.rglob("*") if p.is_file()]
    row = _row(resolved.name, "path", None, None, resolved, _size(files))
    try:
        source, config = resolve_path_source(str(resolved))
    except MlxAgentError as exc:
        row["problem"] = _problem(exc)
        with contextlib.suppress(MlxAgentError):  # no config: the problem already says so
            _describe(row, read_config(resolved))
        return row
    _describe(row, config)
    _serving(row, source, config, runtimes, free)
    return row


def find_models(dirs: list[Path], free: int | None) -> list[ModelRow]:
    """Return a row for every repo of the Hugging Face cache, then for every model directory in ``dirs``."""
    runtimes = Runtimes()
    rows = [repo_row(repo, repo_dir, runtimes, free) for repo, repo_dir in cached_repos(hf_hub_cache())]
    seen: set[Path] = set()
    for given in dirs:
        if not given.expanduser().is_dir():  # a mistyped --dir would otherwise read as a folder without models
            raise InvalidArguments(f"--dir {given} is not a directory", details={"dir": str(given)})
        for model_dir in model_dirs(given.expanduser().absolute()):
            if model_dir.resolve() not in seen:
                seen.add(model_dir.resolve())
                rows.append(dir_row(model_dir, runtimes, free))
    return rows
