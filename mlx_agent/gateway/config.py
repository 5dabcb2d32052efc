"""The gateway's config file: what the supervisor writes (0600) and ``python -m mlx_agent.gateway --config`` reads.

The schema is ``mlx_agent/schemas/gateway_config.json``. Loading validates every field and refuses anything
unknown or unsafe (a host other than 127.0.0.1, relative paths, a worker argv without ``{port}``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlx_agent.gateway.policy import Policy, PolicyError, parse_policy

CONFIG_VERSION = "1.0"
PORT_PLACEHOLDER = "{port}"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

TOP_KEYS = {"format_version", "host", "port", "model_id", "model_path", "max_tokens", "worker", "weight_bytes",
            "policy", "policy_path", "control_token_path", "api_key_path", "file_checks", "max_body_bytes"}
REQUIRED_KEYS = TOP_KEYS - {"weight_bytes", "policy", "api_key_path", "file_checks", "max_body_bytes"}
WORKER_KEYS = {"argv", "env", "cwd", "readiness", "ready_timeout_s", "log_path"}
# A recipe's readiness check: GET path (or POST ``post``), expect status, JSON fields equal to ``json`` and
# ``nonnull`` fields present; ``loaded_before_listen`` is informative only.
READINESS_KEYS = {"path", "status", "json", "post", "nonnull", "timeout_s", "loaded_before_listen"}


class ConfigError(ValueError):
    """The config file is missing, unreadable or invalid; the message says which field."""


@dataclass(frozen=True)
class FileCheck:
    """A file whose content must not change while the gateway loads workers (an adapter, a training receipt)."""

    path: Path
    sha256: str
    size: int


@dataclass(frozen=True)
class WorkerSpec:
    """How to start the one worker: argv with ``{port}``, extra env, cwd, readiness and its log."""

    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    readiness: dict[str, Any]
    ready_timeout_s: float
    log_path: Path

    def argv_for(self, port: int) -> list[str]:
        """Return the argv with the private port filled in."""
        return [arg.replace(PORT_PLACEHOLDER, str(port)) for arg in self.argv]


@dataclass(frozen=True)
class GatewayConfig:
    """Everything one gateway needs: where it listens, the one model it serves, its worker and its guards."""

    host: str
    port: int
    model_id: str
    model_path: Path
    max_tokens: int
    worker: WorkerSpec
    policy_path: Path
    control_token_path: Path
    weight_bytes: int | None = None
    policy: Policy = field(default_factory=Policy)
    api_key_path: Path | None = None
    file_checks: tuple[FileCheck, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES

    @property
    def model_names(self) -> frozenset[str]:
        """Return the names a request may use for the model: its id, ``default_model`` and its path."""
        return frozenset({self.model_id, "default_model", str(self.model_path)})


def _int(value: object, name: str, low: int, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise ConfigError(f"{name} must be an integer {bound}")
    return value


def _abs_path(value: object, name: str) -> Path:
    if not isinstance(value, str) or not value.startswith("/"):
        raise ConfigError(f"{name} must be an absolute path")
    return Path(value)


def _str(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{name} must be a non-empty string")
    return value


def _keys(obj: object, name: str, allowed: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ConfigError(f"{name} must be a JSON object")
    unknown = sorted(set(obj) - allowed)
    missing = sorted(required - set(obj))
    if unknown:
        raise ConfigError(f"unknown field(s) in {name}: {', '.join(unknown)}")
    if missing:
        raise ConfigError(f"missing field(s) in {name}: {', '.join(missing)}")
    return obj


def _readiness(raw: object) -> dict[str, Any]:
    """Validate a recipe's readiness check, as ``supervise.readiness.probe`` reads it."""
    spec = _keys(raw, "worker.readiness", READINESS_KEYS, {"path"})
    path = _str(spec["path"], "worker.readiness.path")
    if not path.startswith("/"):
        raise ConfigError("worker.readiness.path must start with /")
    expected = spec.get("json")
    if expected is not None and not isinstance(expected, dict):
        raise ConfigError("worker.readiness.json must be an object or null")
    post = spec.get("post")
    if post is not None and not isinstance(post, dict):
        raise ConfigError("worker.readiness.post must be an object or null")
    nonnull = spec.get("nonnull", [])
    if not isinstance(nonnull, list) or not all(isinstance(k, str) for k in nonnull):
        raise ConfigError("worker.readiness.nonnull must be a list of field names")
    timeout = spec.get("timeout_s", 2)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
        raise ConfigError("worker.readiness.timeout_s must be a number > 0")
    return {"path": path, "status": _int(spec.get("status", 200), "worker.readiness.status", 100, 599),
            "json": expected, "post": post, "nonnull": nonnull, "timeout_s": float(timeout)}


def _worker(raw: object) -> WorkerSpec:
    spec = _keys(raw, "worker", WORKER_KEYS, {"argv", "log_path"})
    argv = spec["argv"]
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ConfigError("worker.argv must be a non-empty list of strings")
    if not any(PORT_PLACEHOLDER in a for a in argv):
        raise ConfigError("worker.argv must contain the {port} placeholder")
    env = spec.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ConfigError("worker.env must map strings to strings")
    timeout = spec.get("ready_timeout_s", 120)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not timeout > 0:
        raise ConfigError("worker.ready_timeout_s must be a number > 0")
    return WorkerSpec(argv=tuple(argv), env={**env, **OFFLINE_ENV}, cwd=_abs_path(spec.get("cwd", "/"), "worker.cwd"),
                      readiness=_readiness(spec.get("readiness", {"path": "/health"})),
                      ready_timeout_s=float(timeout), log_path=_abs_path(spec["log_path"], "worker.log_path"))


def _file_checks(raw: object) -> tuple[FileCheck, ...]:
    if not isinstance(raw, list):
        raise ConfigError("file_checks must be a list")
    checks = []
    for i, item in enumerate(raw):
        entry = _keys(item, f"file_checks[{i}]", {"path", "sha256", "size"}, {"path", "sha256", "size"})
        digest = entry["sha256"]
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise ConfigError(f"file_checks[{i}].sha256 must be 64 lowercase hex digits")
        checks.append(FileCheck(_abs_path(entry["path"], f"file_checks[{i}].path"), digest,
                                _int(entry["size"], f"file_checks[{i}].size", 0)))
    return tuple(checks)


def parse_config(doc: object) -> GatewayConfig:
    """Return the validated config in ``doc``; raise ``ConfigError`` naming the first bad field."""
    raw = _keys(doc, "config", TOP_KEYS, REQUIRED_KEYS)
    version = raw["format_version"]
    if not isinstance(version, str) or not version.startswith("1."):
        raise ConfigError(f"unsupported format_version {version!r}; this gateway reads 1.x")
    if raw["host"] != "127.0.0.1":
        raise ConfigError("host must be 127.0.0.1: the gateway listens on loopback only")
    weight_bytes = raw.get("weight_bytes")
    if weight_bytes is not None:
        weight_bytes = _int(weight_bytes, "weight_bytes", 0)
    try:
        policy = parse_policy(raw["policy"]) if "policy" in raw else Policy()
    except PolicyError as exc:
        raise ConfigError(f"policy: {exc}") from exc
    api_key_path = raw.get("api_key_path")
    return GatewayConfig(
        host="127.0.0.1",
        port=_int(raw["port"], "port", 1, 65535),
        model_id=_str(raw["model_id"], "model_id"),
        model_path=_abs_path(raw["model_path"], "model_path"),
        max_tokens=_int(raw["max_tokens"], "max_tokens", 1),
        worker=_worker(raw["worker"]),
        policy_path=_abs_path(raw["policy_path"], "policy_path"),
        control_token_path=_abs_path(raw["control_token_path"], "control_token_path"),
        weight_bytes=weight_bytes,
        policy=policy,
        api_key_path=None if api_key_path is None else _abs_path(api_key_path, "api_key_path"),
        file_checks=_file_checks(raw.get("file_checks", [])),
        max_body_bytes=_int(raw.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES), "max_body_bytes", 1024),
    )


def load_config(path: Path) -> GatewayConfig:
    """Read and validate the config file at ``path``."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"config {path} is not JSON: {exc}") from exc
    return parse_config(doc)


def read_secret_file(path: Path, what: str) -> str:
    """Return the one secret in a private file; refuse a file others can read or an empty one."""
    lines = read_private_lines(path, what)
    if len(lines) != 1:
        raise ConfigError(f"{what} {path} must hold exactly one token")
    return lines[0]


def read_private_lines(path: Path, what: str) -> list[str]:
    """Return the non-empty, non-comment lines of a file only its owner may read or write."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from exc
    if mode & 0o077:
        raise ConfigError(f"{what} {path} is accessible to other users (mode {mode & 0o777:o}); chmod 600 it")
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if not lines:
        raise ConfigError(f"{what} {path} is empty")
    return lines
