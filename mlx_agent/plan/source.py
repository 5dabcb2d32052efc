"""Resolve a model source (``--path`` or ``--repo``) to local files and their identity. Never downloads."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from mlx_agent.errors import InvalidArguments, ModelInvalid
from mlx_agent.errors.commands import ConfigMissing, ConfigNotObject, ConfigUnparsable, ModelNotLocal
from mlx_agent.identity import directory_identity, file_identity, list_files
from mlx_agent.media_kinds import PIPELINE_INDEX, pipeline_class
from mlx_agent.media_kinds import config_path as declared_by

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")


def hf_hub_cache() -> Path:
    """Return the Hugging Face hub cache directory, honouring the same variables huggingface_hub reads."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser().absolute()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser().absolute() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return (base / "huggingface" / "hub").absolute()


def read_config(model_dir: Path) -> dict[str, Any]:
    """Return the model's parsed config.json (a pipeline's ``model_index.json``), or refuse a directory without."""
    config_path = declared_by(model_dir)
    if not config_path.is_file():
        raise ConfigMissing(
            f"{model_dir} has no config.json, so it is not a model directory", details={"path": str(model_dir)}
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigUnparsable(
            f"{config_path} does not parse as JSON: {exc}", details={"path": str(config_path)}
        ) from exc
    if not isinstance(config, dict):
        raise ConfigNotObject(
            f"{config_path} holds a JSON {type(config).__name__}, not an object", details={"path": str(config_path)}
        )
    return config


def needs_tokenizer(config: dict[str, Any]) -> bool:
    """Say whether a model needs tokenizer files at its root.

    A diffusers pipeline keeps its tokenizer in its ``tokenizer/`` folder, and a NeMo ASR checkpoint (Parakeet,
    Canary) carries its vocabulary in its config; every other model reads one from the root.
    """
    target = config.get("target")
    nemo = isinstance(target, str) and target.startswith("nemo.collections.asr.")
    return pipeline_class(config) is None and not nemo


def check_complete(
    model_dir: Path, names: list[str], error: type[ModelInvalid | ModelNotLocal], *, tokenizer: bool = True
) -> None:
    """Refuse a model directory that lacks weights, an indexed shard, or (where ``tokenizer``) a tokenizer.

    Weights may lie in subfolders (a pipeline's components): ``names`` is every file, at any depth.
    """
    present = set(names)
    index_name = "model.safetensors.index.json"
    if index_name in present:
        try:
            weight_map = json.loads((model_dir / index_name).read_text(encoding="utf-8"))["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ModelInvalid(
                f"{model_dir / index_name} is not a valid weight index: {exc}",
                details={"path": str(model_dir / index_name)},
            ) from exc
        missing = [s for s in shards if s not in present]
        if missing:
            raise error(
                f"{model_dir} lacks weight shards named by its index: {', '.join(missing)}",
                details={"path": str(model_dir), "missing": missing},
            )
    elif not any(n.endswith(".safetensors") for n in names):
        raise error(f"{model_dir} holds no .safetensors weights", details={"path": str(model_dir)})
    if tokenizer and not any(t in present for t in TOKENIZER_FILES):
        raise error(
            f"{model_dir} holds no tokenizer files ({', '.join(TOKENIZER_FILES)})", details={"path": str(model_dir)}
        )


def resolve_path_source(raw: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the source record of a plain local model directory, and its config."""
    given = Path(raw).expanduser()
    if not given.exists():
        raise ModelNotLocal(f"model path {raw} does not exist", details={"path": raw})
    model_dir = given.resolve()
    if not model_dir.is_dir():
        raise ModelInvalid(f"model path {model_dir} is not a directory", details={"path": str(model_dir)})
    config = read_config(model_dir)
    names = list_files(model_dir)
    check_complete(model_dir, names, ModelInvalid, tokenizer=needs_tokenizer(config))
    return {
        "kind": "path",
        "path": str(model_dir),
        "model_type": config.get("model_type"),
        "files": directory_identity(model_dir),
    }, config


def _snapshot_files(snapshot: Path, names: list[str]) -> list[dict[str, Any]]:
    files = []
    for name in names:
        link = snapshot / name
        target = link.resolve()
        if not target.is_file():
            raise ModelNotLocal(f"{name} in the cached snapshot points at a missing blob", details={"path": str(link)})
        if link.is_symlink() and target.parent.name == "blobs":
            files.append({"name": name, "blob": target.name, "size": target.stat().st_size})
        else:
            # A cache laid out without links (copied, or on a filesystem without them) binds like a plain dir.
            files.append(file_identity(link, name))
    return files


def resolve_repo_source(repo: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the source record of a repo fully present in the local Hugging Face cache, and its config."""
    if not REPO_ID.match(repo):
        raise InvalidArguments(f"--repo {repo!r} is not of the form ORG/NAME", details={"repo": repo})
    cache = hf_hub_cache()
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    ref = repo_dir / "refs" / "main"
    if not ref.is_file():
        raise ModelNotLocal(
            f"{repo} is not in the Hugging Face cache at {cache}", details={"repo": repo, "cache_dir": str(cache)}
        )
    revision = ref.read_text(encoding="utf-8").strip()
    snapshot = repo_dir / "snapshots" / revision
    if not snapshot.is_dir():
        raise ModelNotLocal(
            f"{repo} has no cached snapshot for revision {revision}", details={"repo": repo, "revision": revision}
        )
    if any(p.name.endswith(".incomplete") for p in (repo_dir / "blobs").glob("*")):
        raise ModelNotLocal(
            f"{repo} has a download in progress in the cache", details={"repo": repo, "revision": revision}
        )
    names = list_files(snapshot)
    if "config.json" not in names and PIPELINE_INDEX not in names:
        raise ModelNotLocal(
            f"{repo}@{revision} lacks config.json in the cache", details={"repo": repo, "revision": revision}
        )
    files = _snapshot_files(snapshot, names)  # first, so a dangling link reads as not local, not invalid
    config = read_config(snapshot)
    check_complete(snapshot, names, ModelNotLocal, tokenizer=needs_tokenizer(config))
    return {
        "kind": "hf_cache",
        "repo": repo,
        "revision": revision,
        "path": str(snapshot.absolute()),
        "model_type": config.get("model_type"),
        "files": files,
    }, config
