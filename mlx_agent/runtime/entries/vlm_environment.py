"""mlx_vlm's start-up settings come from the reviewed argv only, never from the user's own environment.

mlx_vlm's CLI hands each start-up flag to its server through an environment variable (``server/cli.py``:
``os.environ["KV_BITS"] = ...``), and its server reads its settings back from the environment
(``RuntimeConfig.from_env``, and the lifespan's ``MLX_VLM_PRELOAD_*``). The CLI writes a variable only for a
flag it was given, so one left in the user's shell would reach the worker unreviewed: a drafter or a second
model preloaded (``MLX_VLM_DRAFT_MODEL``, ``MLX_VLM_PRELOAD_TTS_MODEL``), KV bits or a context cap, a bearer
key the front never sends (``MLX_VLM_SERVER_API_KEY``), code from a model folder trusted
(``MLX_TRUST_REMOTE_CODE``). Every variable the CLI writes is cleared before mlx_vlm is imported; what the
plan asks for then arrives through the CLI's flags. The prefix cache's ``APC_*`` are not the CLI's: the plan
sets them itself (``plan/decoding.prefix_cache_env`` writes ``APC_ENABLED`` either way).

The names are read from the CLI's source, not imported, so a flag added upstream is cleared too; a source in
which none is found stops the worker (``SeamChanged``) rather than running with the user's environment.
"""

from __future__ import annotations

import importlib.util
import os
import re

from mlx_agent.errors import SeamChanged

CLI_MODULE = "mlx_vlm.server.cli"
DISCOVERY_MODULE = "mlx_vlm.server.model_discovery"  # its MODEL_PATHS_ENV, which the CLI writes by that name
WRITTEN = re.compile(r'os\.environ\[\s*"([A-Z][A-Z0-9_]*)"\s*\]\s*=')
NAMED = re.compile(r'^MODEL_PATHS_ENV\s*=\s*"([A-Z][A-Z0-9_]*)"', re.M)


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise SeamChanged(f"mlx_vlm has no {module}: the start-up settings it reads cannot be cleared")
    with open(spec.origin, encoding="utf-8") as source:
        return source.read()


def cli_settings() -> set[str]:
    """Return the environment variables mlx_vlm's CLI writes for its start-up flags."""
    names = set(WRITTEN.findall(_source(CLI_MODULE)))
    names.update(NAMED.findall(_source(DISCOVERY_MODULE)))
    if not names:
        raise SeamChanged(f"{CLI_MODULE} writes no environment variable by name any more: check how it passes flags")
    return names


def clear_cli_settings() -> list[str]:
    """Remove every variable mlx_vlm's CLI writes from this process's environment; return those that were set."""
    present = sorted(name for name in cli_settings() if name in os.environ)
    for name in present:
        del os.environ[name]
    return present
