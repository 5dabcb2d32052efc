"""The front's config file: what the supervisor writes (0600) and ``python -m mlx_agent.gateway --config`` reads.

The config is the plan's projection (``plan/front.py``); its shape is ``records.FrontConfig`` (and
``schemas/front_config.json``, generated from it). Loading validates every field with that declaration and
refuses anything unknown or unsafe (a host other than 127.0.0.1, relative paths, a worker argv without its
placeholder unless its port goes in its environment, two models answering to one name).
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from mlx_agent.errors import FrontConfigInvalid
from mlx_agent.wire import PORT_PLACEHOLDER, SOCKET_PLACEHOLDER

if TYPE_CHECKING:
    from mlx_agent.records.front import FrontConfig

PLACEHOLDERS = {"unix": SOCKET_PLACEHOLDER, "tcp": PORT_PLACEHOLDER}


def parse_config(doc: object) -> FrontConfig:
    """Return the validated config in ``doc``; raise ``FrontConfigInvalid`` naming the first bad field."""
    from pydantic import TypeAdapter, ValidationError

    from mlx_agent.records.front import FrontConfig

    try:
        config: FrontConfig = TypeAdapter(FrontConfig).validate_python(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        raise FrontConfigInvalid(f"{where}: {first['msg']}", details={"field": where}) from None
    names: dict[str, str] = {}
    for model in config["models"]:
        worker = model["worker"]
        placeholder = PLACEHOLDERS[worker["transport"]]
        in_env = worker["transport"] == "tcp" and bool(worker.get("port_env"))  # a native entry reads its port there
        if not in_env and not any(placeholder in arg for arg in worker["argv"]):
            raise FrontConfigInvalid(f"models[{model['served_model_name']}].worker.argv must contain {placeholder}")
        for name in (model["served_model_name"], *model["alias"]):
            if name in names:
                served = model["served_model_name"]
                raise FrontConfigInvalid(f"the name {name!r} is given to {names[name]!r} and {served!r}")
            names[name] = model["served_model_name"]
    return config


def load_config(path: Path) -> FrontConfig:
    """Read and validate the config file at ``path``."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise FrontConfigInvalid(f"cannot read config {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise FrontConfigInvalid(f"config {path} is not JSON: {exc}") from exc
    return parse_config(doc)


def matches(name: str, patterns: list[str]) -> bool:
    """Say whether ``name`` is one of the names or glob patterns (``claude-*``) given."""
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def read_secret_file(path: Path, what: str) -> str:
    """Return the one secret in a private file; refuse a file others can read or an empty one."""
    lines = read_private_lines(path, what)
    if len(lines) != 1:
        raise FrontConfigInvalid(f"{what} {path} must hold exactly one token")
    return lines[0]


def read_private_lines(path: Path, what: str) -> list[str]:
    """Return the non-empty, non-comment lines of a file only its owner may read or write."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise FrontConfigInvalid(f"cannot read {what} {path}: {exc.strerror}") from exc
    if mode & 0o077:
        raise FrontConfigInvalid(f"{what} {path} is accessible to other users (mode {mode & 0o777:o}); chmod 600 it")
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if not lines:
        raise FrontConfigInvalid(f"{what} {path} is empty")
    return lines
