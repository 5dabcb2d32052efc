"""Build the deterministic plan of ``lora train``: base model, dataset, hyperparameters, argv. Writes nothing.

The plan binds the base model's identity (as ``serve start`` binds it), the sha256 of every dataset file,
every hyperparameter (never mlx_lm's defaults), the interpreter and versions, the exact argv of
``python -m mlx_lm lora --train`` and the ``-c`` config document that confirm writes (JSON, which is YAML:
mlx_lm takes the LoRA rank, scale and dropout only from such a file). ``TRAINED`` is the one table of the
hyperparameters: the request field each comes from, and the flag or config key mlx_lm reads it from.
"""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
from pathlib import Path

import mlx_agent
from mlx_agent.canonical import canonical_json
from mlx_agent.errors import InvalidArguments, UnsupportedModel
from mlx_agent.errors.commands import (
    AdapterPathNotEmpty,
    DatasetInvalid,
    DatasetNotFound,
    RuntimeModelMismatch,
    RuntimeNotInstalled,
)
from mlx_agent.files import sha256_file
from mlx_agent.home import receipts_dir
from mlx_agent.installed import dist_version, model_support, own_site_paths
from mlx_agent.model_config import vision_markers
from mlx_agent.plan.source import resolve_path_source, resolve_repo_source
from mlx_agent.plan.training_receipt import ADAPTER_FILES
from mlx_agent.resources import PACKAGE_DIR
from mlx_agent.wire import OFFLINE_ENV, TRAINING_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.plan.options import Opt
    from mlx_agent.plan.requests import TrainRequest

OPERATION = "lora.train"
WATCHER_MODULE = "mlx_agent.supervise.train_watch"
WATCHER_SOURCE = PACKAGE_DIR / "supervise" / "train_watch.py"
TRAIN, VALID = "train.jsonl", "valid.jsonl"
# Fixed for every plan, written out so that mlx_lm's defaults never decide them.
OPTIMIZER = "adam"
GRAD_ACCUMULATION_STEPS = 1


class Trained:
    """One hyperparameter: the request field it comes from (or the value mlx-agent fixes) and where mlx_lm reads it.

    ``flag`` is mlx_lm lora's flag; ``config`` the path of the key in the ``-c`` document, for what mlx_lm
    takes only from a file (the LoRA parameters) or what a flag cannot say (``mask_prompt`` false).
    """

    __slots__ = ("config", "fixed", "flag", "name")

    def __init__(self, name: str, flag: str | None = None, config: tuple[str, ...] = (), **fixed: Any) -> None:
        self.name = name  # the TrainRequest field and the plan's hyperparameters key
        self.flag = flag
        self.config = config
        self.fixed = fixed  # {"value": V}: not an option, always V


# Every hyperparameter of a training, once: request -> plan's hyperparameters -> argv or config, in argv order.
TRAINED = (
    Trained("fine_tune_type", "--fine-tune-type"),
    Trained("optimizer", "--optimizer", value=OPTIMIZER),
    Trained("num_layers", "--num-layers"),
    Trained("batch_size", "--batch-size"),
    Trained("iters", "--iters"),
    Trained("val_batches", "--val-batches"),
    Trained("learning_rate", "--learning-rate"),
    Trained("steps_per_report", "--steps-per-report"),
    Trained("steps_per_eval", "--steps-per-eval"),
    Trained("save_every", "--save-every"),
    Trained("grad_accumulation_steps", "--grad-accumulation-steps", value=GRAD_ACCUMULATION_STEPS),
    Trained("max_seq_length", "--max-seq-length"),
    Trained("seed", "--seed"),
    Trained("rank", config=("lora_parameters", "rank")),
    Trained("scale", config=("lora_parameters", "scale")),
    Trained("dropout", config=("lora_parameters", "dropout")),
    Trained("mask_prompt", config=("mask_prompt",)),
    Trained("grad_checkpoint", config=("grad_checkpoint",), value=False),
    Trained("lr_schedule", config=("lr_schedule",), value=None),
)
# The request's fields that are not hyperparameters: what is trained on, and where things go.
INPUTS = ("path", "repo", "data", "adapter_path", "receipts_dir")


def _options() -> dict[str, Opt]:
    """Return the request's option of each hyperparameter that comes from the request."""
    from mlx_agent.plan.requests import TrainRequest

    options = {opt.dest: opt for opt in TrainRequest.OPTIONS}
    return {row.name: options[row.name] for row in TRAINED if not row.fixed}


def _out_of_range(opt: Opt, value: Any) -> str | None:
    """Say what is wrong with ``value`` against the bounds and choices its option declares, or None."""
    if opt.choices is not None and value not in opt.choices:
        return f"must be one of {', '.join(opt.choices)}"
    low, high = opt.minimum, opt.maximum
    if low is not None and (value < low or (opt.min_open and value == low)):
        return "must be positive" if opt.min_open and low == 0 else f"must be at least {low:g}"
    if high is not None and value > high:
        return f"must be at most {high:g}"
    return None


def _validate(req: TrainRequest) -> None:
    """Refuse what the command line would refuse (for callers of the library), and what mlx_lm would misread."""
    if (req.path is None) == (req.repo is None):
        raise InvalidArguments("give exactly one of --path or --repo")
    for name, opt in _options().items():
        value = getattr(req, name)
        wrong = _out_of_range(opt, value)
        if wrong is not None:
            raise InvalidArguments(f"{opt.flag} {wrong}", details={name: value})
    if req.num_layers == 0:
        # mlx_lm would read 0 as "every layer" (a slice from -0): say -1 for that.
        raise InvalidArguments(
            "--num-layers must be at least 1, or -1 for every layer", details={"num_layers": req.num_layers}
        )
    if req.dropout >= 1:
        raise InvalidArguments("--dropout must be in [0, 1)", details={"dropout": req.dropout})


def _check_base(config: dict[str, Any], num_layers: int) -> int | None:
    """Refuse a base mlx_lm cannot fine-tune; return its layer count when config.json gives one."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise UnsupportedModel("config.json names no model_type", details={"model_type": model_type})
    markers = vision_markers(config)
    if markers:
        raise RuntimeModelMismatch(
            f"{model_type} is a vision model ({', '.join(markers)}); mlx_lm lora trains text models only",
            details={"model_type": model_type, "vision_markers": markers},
        )
    support = model_support("mlx_lm", None)
    if support is not None:
        types, remapping = support
        if remapping.get(model_type.lower(), model_type.lower()) not in types:
            raise UnsupportedModel(
                f"mlx_lm has no model class for model_type {model_type!r}", details={"model_type": model_type}
            )
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int) or isinstance(layers, bool):
        return None
    if num_layers > layers:
        raise InvalidArguments(
            f"--num-layers {num_layers} exceeds the base model's {layers} layers; "
            "give at most that, or -1 for every layer",
            details={"num_layers": num_layers, "model_layers": layers},
        )
    return layers


def _lines(path: Path) -> int:
    """Count the lines mlx_lm reads from a JSON Lines file (a last line without a newline counts)."""
    count, last = 0, b"\n"
    with open(path, "rb") as fh:
        while chunk := fh.read(1024 * 1024):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count if last == b"\n" else count + 1


def _record_format(path: Path) -> str:
    """Return the format mlx_lm will choose from the file's first record, as it chooses it."""
    try:
        with open(path, "rb") as fh:
            first = json.loads(fh.readline())
    except (OSError, ValueError) as exc:
        raise DatasetInvalid(f"the first line of {path} is not JSON: {exc}", details={"path": str(path)}) from exc
    if not isinstance(first, dict):
        raise DatasetInvalid(f"the first line of {path} is not a JSON object", details={"path": str(path)})
    if "prompt" in first and "completion" in first:
        return "completions"
    if "messages" in first:
        return "chat"
    if "text" in first:
        return "text"
    raise DatasetInvalid(
        f"the first record of {path} has none of text, messages, or prompt and completion",
        details={"path": str(path), "keys": sorted(first)[:20]},
    )


def resolve_dataset(raw: str, req: TrainRequest) -> dict[str, Any]:
    """Return the plan's dataset record: every ``*.jsonl`` file's size, sha256 and line count."""
    given = Path(raw).expanduser()
    if not given.exists():
        # mlx_lm would take a missing directory for a Hugging Face dataset name and download it: never.
        raise DatasetNotFound(f"dataset directory {raw} does not exist", details={"path": raw})
    root = given.resolve()
    if not root.is_dir():
        raise DatasetNotFound(f"dataset path {root} is not a directory", details={"path": str(root)})
    names = sorted(p.name for p in root.glob("*.jsonl") if not p.name.startswith(".") and p.is_file())
    if TRAIN not in names:
        raise DatasetInvalid(f"{root} has no {TRAIN}", details={"path": str(root), "files": names})
    lines = {n: _lines(root / n) for n in names}
    files = [
        {"name": n, "size": (root / n).stat().st_size, "sha256": sha256_file(root / n), "lines": lines[n]}
        for n in names
    ]
    needed = {TRAIN: True, VALID: req.val_batches != 0}
    formats: dict[str, str] = {}
    for name, required in needed.items():
        if not required:
            continue
        if name not in lines:
            raise DatasetInvalid(
                f"{root} has no {VALID}, which --val-batches {req.val_batches} evaluates on "
                "(pass --val-batches 0 to train without validation)",
                details={"path": str(root), "val_batches": req.val_batches},
            )
        if lines[name] < req.batch_size:
            raise DatasetInvalid(
                f"{root / name} has {lines[name]} lines, fewer than --batch-size {req.batch_size}",
                details={"path": str(root / name), "lines": lines[name], "batch_size": req.batch_size},
            )
        formats[name] = _record_format(root / name)
        if req.mask_prompt and formats[name] == "text":
            raise DatasetInvalid(
                f"--mask-prompt needs prompt and completion, or chat records; {root / name} holds plain text",
                details={"path": str(root / name)},
            )
    return {"path": str(root), "formats": formats, "files": files}


def resolve_adapter_dir(raw: str, base_path: str) -> str:
    """Return the absolute adapter output directory, which must be absent or empty; refuse anything else."""
    out = Path(raw).expanduser().resolve()
    base = Path(base_path)
    if out == base or base in out.parents:
        # Files written there would change the base identity the receipt pins.
        raise InvalidArguments(
            f"--adapter-path {out} lies inside the base model directory {base}",
            details={"adapter_path": str(out), "base": str(base)},
        )
    if not out.exists():
        return str(out)
    if not out.is_dir():
        raise AdapterPathNotEmpty(
            f"--adapter-path {out} exists and is not a directory", details={"adapter_path": str(out)}
        )
    entries = sorted(p.name for p in out.iterdir())
    if entries:
        raise AdapterPathNotEmpty(
            f"--adapter-path {out} is not empty ({len(entries)} entries)",
            details={"adapter_path": str(out), "entries": entries[:20]},
        )
    return str(out)


def _trainer() -> dict[str, Any]:
    paths = own_site_paths()
    versions = {dist: dist_version(dist, paths) for dist in ("mlx", "mlx-lm")}
    if versions["mlx-lm"] is None:
        raise RuntimeNotInstalled(
            f"mlx-lm is not installed for {sys.executable}; lora train runs mlx_lm.lora",
            details={"runtime": "mlx_lm", "interpreter": sys.executable},
        )
    return {
        "interpreter": str(Path(sys.executable).absolute()),
        "module": "mlx_lm",
        "command": "lora",
        "versions": {**versions, "mlx-agent": mlx_agent.__version__},
    }


def child_env() -> dict[str, str]:
    """Return the environment added to the watcher and the trainer: offline, and our checkout if not installed."""
    env = dict(OFFLINE_ENV)
    root = str(PACKAGE_DIR.parent)
    if root not in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        env["PYTHONPATH"] = root  # the watcher is python -m mlx_agent.supervise.train_watch
    return env


def hyperparameters(req: TrainRequest) -> dict[str, Any]:
    """Return every hyperparameter of the training (``TRAINED``), including those mlx-agent fixes."""
    options = _options()
    hp: dict[str, Any] = {}
    for row in TRAINED:
        if row.fixed:
            hp[row.name] = row.fixed["value"]
            continue
        value, kind = getattr(req, row.name), options[row.name].kind
        hp[row.name] = float(value) if kind == "float" else bool(value) if kind == "flag" else value
    return hp


def config_document(hp: dict[str, Any]) -> dict[str, Any]:
    """Return the ``-c`` config: the hyperparameters only a file carries, and what a missing flag leaves open."""
    document: dict[str, Any] = {
        "optimizer_config": {hp["optimizer"]: {}},
        "resume_adapter_file": None,
        "test": False,
        "report_to": None,
    }
    for row in TRAINED:
        if row.config:
            *parents, key = row.config
            table = document
            for parent in parents:
                table = table.setdefault(parent, {})
            table[key] = hp[row.name]
    return document


def build_argv(interpreter: str, base: str, data: str, out: str, config_path: str, hp: dict[str, Any]) -> list[str]:
    """Return the exact argv of the training process: its inputs, then each flag of ``TRAINED``."""
    argv = [interpreter, "-m", "mlx_lm", "lora", "--model", base, "--train", "--data", data]
    argv += ["--adapter-path", out, "-c", config_path]
    for row in TRAINED:
        if row.flag is not None:
            value = hp[row.name]
            argv += [row.flag, repr(value) if isinstance(value, float) else str(value)]
    return argv


def build_training_plan(req: TrainRequest) -> dict[str, Any]:
    """Return the plan (without its hash) for one training; reads files, writes nothing."""
    _validate(req)
    base, config = resolve_path_source(req.path) if req.path is not None else resolve_repo_source(req.repo or "")
    layers = _check_base(config, req.num_layers)
    dataset = resolve_dataset(req.data, req)
    out = resolve_adapter_dir(req.adapter_path, base["path"])
    trainer = _trainer()
    hp = hyperparameters(req)
    document = config_document(hp)
    train_dir = receipts_dir("train", req.receipts_dir)
    config_sha = hashlib.sha256(canonical_json(document).encode("utf-8")).hexdigest()
    config_path = str(train_dir / f"config-{config_sha[:16]}.yaml")
    return {
        "format_version": TRAINING_VERSION,
        "operation": OPERATION,
        "base": base,
        "base_layers": layers,
        "dataset": dataset,
        "hyperparameters": hp,
        "adapter_path": out,
        "adapter_files": list(ADAPTER_FILES),
        "trainer": trainer,
        "watcher": {"module": WATCHER_MODULE, "source_sha256": sha256_file(WATCHER_SOURCE)},
        "receipts_dir": str(train_dir),
        "config": document,
        "config_path": config_path,
        "argv": build_argv(trainer["interpreter"], base["path"], dataset["path"], out, config_path, hp),
        "env": child_env(),
        "cwd": "/",
    }
