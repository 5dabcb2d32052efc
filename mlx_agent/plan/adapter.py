"""LoRA adapters bound by content: the checks an adapter directory must pass, and its identity.

Two layouts, each read as its runtime reads it: mlx_lm's (``adapter_config.json`` with ``num_layers`` and
``lora_parameters``, and ``adapters.safetensors``) and mlx-vlm's (``mlx_vlm.trainer.common.model._read_checkpoint``:
``adapters.safetensors``, else ``weights.safetensors``, with ``adapter_config.json`` beside it). mlx-vlm loads
the weights without strict names, so a tensor of a layer it did not adapt is dropped in silence: its adapter is
taken only as mlx_vlm's own trainer saves it, ``lora_parameters.keys`` naming the adapted layers, and every tensor
must belong to one of them. A recipe's ``adapter_layout`` capability names its runtime's layout.

The same identity is rechecked inside the server process right before the model loads (see
``mlx_agent.runtime.entries.file_checks``), so a changed adapter never reaches a running model unreviewed.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlx_agent.errors.commands import AdapterInvalid
from mlx_agent.files import changed_files, sha256_file
from mlx_agent.identity import read_safetensors_header

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.records.plan import AdapterRecord, ContentRecord
    from mlx_agent.worker_contract import FileCheck

CONFIG = "adapter_config.json"
WEIGHTS = "adapters.safetensors"
VLM_WEIGHTS = (WEIGHTS, "weights.safetensors")  # mlx-vlm reads the first present: the one bound
VLM_DEFAULT_NUM_LAYERS = -1  # mlx_vlm's DEFAULT_LORA_NUM_LAYERS: every layer, where the config names none
FINE_TUNE_TYPES = ("lora", "dora")
# Parameter names mlx_lm's LoRA and DoRA layers add; anything else is not an adapter tensor.
ADAPTER_SUFFIXES = (".lora_a", ".lora_b", ".m")


def _real_directory(raw: str) -> Path:
    given = Path(raw).expanduser().absolute()
    if not given.exists():
        raise AdapterInvalid(f"adapter path {raw} does not exist", details={"path": raw})
    if given.resolve() != given:
        # A symlink anywhere on the way would let the bound files change under a path that looks reviewed.
        raise AdapterInvalid(
            f"adapter path {given} is, or lies under, a symbolic link ({given.resolve()})",
            details={"path": str(given), "resolved": str(given.resolve())},
        )
    if not given.is_dir():
        raise AdapterInvalid(f"adapter path {given} is not a directory", details={"path": str(given)})
    return given


def _file(directory: Path, name: str) -> Path:
    path = directory / name
    if path.is_symlink():
        raise AdapterInvalid(f"{path} is a symbolic link", details={"path": str(path)})
    if not path.is_file():
        raise AdapterInvalid(f"{directory} has no {name}", details={"path": str(path)})
    return path


def _check_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise AdapterInvalid(f"{path} does not parse as JSON: {exc}", details={"path": str(path)}) from exc
    problems = []
    if not isinstance(config, dict):
        raise AdapterInvalid(f"{path} is not a JSON object", details={"path": str(path)})
    if not isinstance(config.get("num_layers"), int):
        problems.append("num_layers must be an integer")
    if not isinstance(config.get("lora_parameters"), dict):
        problems.append("lora_parameters must be an object")
    if config.get("fine_tune_type", "lora") not in FINE_TUNE_TYPES:
        problems.append(f"fine_tune_type must be one of {', '.join(FINE_TUNE_TYPES)}")
    if problems:
        raise AdapterInvalid(
            f"{path} is not an mlx_lm adapter config: {'; '.join(problems)}",
            details={"path": str(path), "problems": problems},
        )
    return config


def _check_weights(path: Path) -> None:
    try:
        _, header = read_safetensors_header(path)
    except Exception as exc:  # the identity module reports a corrupt header as model_invalid; here it is the adapter
        raise AdapterInvalid(f"{path} is not a readable safetensors file", details={"path": str(path)}) from exc
    tensors = [k for k in header if k != "__metadata__"]
    foreign = [k for k in tensors if not k.endswith(ADAPTER_SUFFIXES)]
    if not tensors or foreign:
        raise AdapterInvalid(
            f"{path} does not hold only adapter tensors (*{', *'.join(ADAPTER_SUFFIXES)})",
            details={"path": str(path), "foreign_tensors": foreign[:10]},
        )


def _check_vlm_config(path: Path) -> dict[str, Any]:
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise AdapterInvalid(f"{path} does not parse as JSON: {exc}", details={"path": str(path)}) from exc
    if not isinstance(config, dict):
        raise AdapterInvalid(f"{path} is not a JSON object", details={"path": str(path)})
    problems = []
    keys = config.get("lora_parameters", {}).get("keys") if isinstance(config.get("lora_parameters"), dict) else None
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        problems.append("lora_parameters.keys must list the adapted layers (as mlx_vlm's get_peft_model saves them)")
    if config.get("fine_tune_type", "lora") not in FINE_TUNE_TYPES:
        # "full" replaces the model's own weights: not an adapter of the reviewed model
        problems.append(f"fine_tune_type must be one of {', '.join(FINE_TUNE_TYPES)}")
    if not isinstance(config.get("num_layers", VLM_DEFAULT_NUM_LAYERS), int):
        problems.append("num_layers must be an integer")
    if problems:
        raise AdapterInvalid(
            f"{path} is not an mlx-vlm adapter config: {'; '.join(problems)}",
            details={"path": str(path), "problems": problems},
        )
    return config


def _check_vlm_names(path: Path, keys: list[str]) -> None:
    """Refuse tensors of layers the config does not adapt (mlx_vlm would drop them without a word)."""
    _, header = read_safetensors_header(path)
    layers = {*keys, *(f"language_model.{k}" for k in keys)}  # a key is looked up on the model, then its language model
    stray = [k for k in header if k != "__metadata__" and k.rsplit(".", 1)[0] not in layers]
    if stray:
        raise AdapterInvalid(
            f"{path} holds tensors of layers its adapter_config.json does not adapt: mlx-vlm would ignore them",
            details={"path": str(path), "stray_tensors": stray[:10]},
        )


def resolve_vlm_adapter(raw: str) -> AdapterRecord:
    """Return the plan's adapter record for mlx-vlm's ``--adapter-path``: the two files its loader reads."""
    directory = _real_directory(raw)
    present = [name for name in VLM_WEIGHTS if (directory / name).exists() or (directory / name).is_symlink()]
    weights_path = _file(directory, present[0] if present else WEIGHTS)
    config_path = _file(directory, CONFIG)
    config = _check_vlm_config(config_path)
    _check_weights(weights_path)
    _check_vlm_names(weights_path, config["lora_parameters"]["keys"])
    return {
        "path": str(directory),
        "fine_tune_type": config.get("fine_tune_type", "lora"),
        "num_layers": config.get("num_layers", VLM_DEFAULT_NUM_LAYERS),
        "files": [file_record(config_path), file_record(weights_path)],
    }


def file_record(path: Path) -> ContentRecord:
    """Return the content identity of one adapter file."""
    return {"name": path.name, "size": path.stat().st_size, "sha256": sha256_file(path)}


def resolve_adapter(raw: str) -> AdapterRecord:
    """Return the plan's adapter record for ``--adapter-path``, refusing anything mlx_lm could not use."""
    directory = _real_directory(raw)
    config_path, weights_path = _file(directory, CONFIG), _file(directory, WEIGHTS)
    config = _check_config(config_path)
    _check_weights(weights_path)
    return {
        "path": str(directory),
        "fine_tune_type": config.get("fine_tune_type", "lora"),
        "num_layers": config["num_layers"],
        "files": [file_record(config_path), file_record(weights_path)],
    }


def expectations(adapter: AdapterRecord) -> tuple[FileCheck, ...]:
    """Return the worker contract's checks that make the server recheck each adapter file before loading."""
    from mlx_agent.worker_contract import FileCheck

    return tuple(FileCheck(str(Path(adapter["path"]) / f["name"]), f["sha256"], f["size"]) for f in adapter["files"])


def verify(adapter: AdapterRecord) -> str:
    """Re-hash a bound adapter now: ``verified``, ``changed`` or ``missing`` (``files.changed_files`` decides)."""
    changed = changed_files([(Path(adapter["path"]) / f["name"], f["sha256"], f["size"]) for f in adapter["files"]])
    if any(c["reason"] == "missing" for c in changed):
        return "missing"
    return "changed" if changed else "verified"
