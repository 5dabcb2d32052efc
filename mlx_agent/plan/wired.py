"""Wired configs: endpoints that other tools were set up to find, and the ports they claim."""

from __future__ import annotations

import json
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def _is_loopback(host: str | None) -> bool:
    return host is not None and (host in LOOPBACK_HOSTS or host.startswith("127."))


def read_wired(wired_dir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Return the readable wired configs (each with its ``file``) and a warning per unreadable one."""
    configs: list[dict[str, Any]] = []
    warnings: list[str] = []
    if not wired_dir.is_dir():
        return configs, warnings
    from urllib.parse import urlsplit

    for path in sorted(wired_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("base_url"), str):
                raise ValueError("not an object with a base_url string")
            split = urlsplit(data["base_url"])
            port = split.port or (443 if split.scheme == "https" else 80)
        except (OSError, ValueError) as exc:
            warnings.append(f"wired config {path} is unreadable and was ignored: {exc}")
            continue
        configs.append({**data, "file": str(path), "host": split.hostname, "port": port})
    return configs, warnings


def loopback_claims(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return each wired config that points at a loopback port, as status lists it."""
    return [
        {
            "port": c["port"],
            "file": c["file"],
            "base_url": c["base_url"],
            "runtime": c.get("runtime"),
            "model": c.get("model"),
        }
        for c in configs
        if _is_loopback(c["host"])
    ]


def claims_on_port(
    configs: list[dict[str, Any]], port: int, runtimes: set[str], model_ids: set[str]
) -> list[dict[str, Any]]:
    """Return the configs that expect another server on loopback ``port`` than one of these runtimes and models."""
    claims = []
    for cfg in configs:
        if cfg["port"] != port or not _is_loopback(cfg["host"]):
            continue
        same_runtime = cfg.get("runtime") is None or cfg.get("runtime") in runtimes
        same_model = cfg.get("model") is None or cfg.get("model") in model_ids
        if not (same_runtime and same_model):
            claims.append(
                {
                    "file": cfg["file"],
                    "base_url": cfg["base_url"],
                    "runtime": cfg.get("runtime"),
                    "model": cfg.get("model"),
                }
            )
    return claims
