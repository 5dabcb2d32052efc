"""The live server's facts for an agent, and ``mlx-agent run AGENT``: the agent started with them, no file written.

The facts come from the port's serve receipt, trusted only once ``servers.status`` has matched the live
process against it and the front has proved it holds the receipt's control token (as ``serve status`` does);
the names are the live front's own list. The key is read from the front's key file by the front's own rule.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from pathlib import Path

from mlx_agent.agent_names import is_pattern
from mlx_agent.errors.commands import AgentNotFound, ModelNotServed, NoServer, UnknownAgent
from mlx_agent.plan import agent_settings as settings
from mlx_agent.plan.agent_settings import AGENTS, ServedFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

LIVE = ("ok", "degraded")  # a degraded front (a model failed, the disk low) still answers for its other models


def served_facts(directory: Path, port: int) -> ServedFacts:
    """Return what the server of ours on ``port`` serves, refusing (``no_server``) when none of ours runs there."""
    from mlx_agent.supervise.receipts import has_front, read_receipt, receipt_path
    from mlx_agent.supervise.servers import status

    entries = status(directory, port)
    if not entries:
        raise NoServer(
            f"no server of ours on port {port}: no receipt in {directory}",
            details={"port": port, "receipts_dir": str(directory)},
        )
    [entry] = entries
    if entry.get("health") not in LIVE or entry.get("state") != "running":
        state, health = entry.get("state"), entry.get("health")
        raise NoServer(
            f"no server of ours answers on port {port} (state {state}, health {health})",
            details={"port": port, "state": state, "health": health, "receipt_path": entry.get("receipt_path")},
        )
    receipt = read_receipt(receipt_path(directory, port))
    if not has_front(receipt):
        raise NoServer(
            f"the server on port {port} has no front of ours (started by an older mlx-agent)",
            details={"port": port, "state": entry.get("state")},
        )
    plan = receipt["plan"]
    live = [m.get("name") for m in entry.get("models") or []]
    models = [m for m in plan["models"] if m["served_model_name"] in live] or list(plan["models"])
    first = models[0]
    # The ceiling caps every reply; --max-tokens is only the default for a request that asks none.
    window, ceiling = first.get("context_window"), first.get("max_tokens_ceiling")
    key_file = plan["front"]["api_key_file"]
    key, single = _key(key_file)
    return ServedFacts(
        base_url=f"http://{receipt.get('host', '127.0.0.1')}:{port}",
        port=port,
        models=tuple(m["served_model_name"] for m in models),
        aliases=tuple(a for m in models for a in m["alias"]),
        api_key=key,
        key_file=key_file,
        context_window=window,
        max_output_tokens=min(ceiling, window) if ceiling and window else ceiling,
        single_key=single,
    )


def _key(key_file: str | None) -> tuple[str | None, bool]:
    """Return the front's first key and whether the file holds only it, read by the front's rule.

    The rule (``gateway.door.config.read_private_lines``): the stripped lines that are neither blank nor a comment.
    """
    if key_file is None:
        return None, True
    from mlx_agent.errors import FrontConfigInvalid

    try:
        text = Path(key_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FrontConfigInvalid(f"cannot read the API key file {key_file}: {exc}", details={"path": key_file}) from exc
    lines = [line.strip() for line in text.splitlines()]
    keys = [line for line in lines if line and not line.startswith("#")]
    if not keys:
        raise FrontConfigInvalid(f"the API key file {key_file} holds no key", details={"path": key_file})
    return keys[0], text.strip() == keys[0]


def check_agent(agent: str, known: tuple[str, ...] = AGENTS) -> None:
    """Refuse an agent (or client kind) there are no settings for."""
    if agent not in known:
        raise UnknownAgent(f"no settings for agent {agent!r}", details={"agent": agent, "agents": list(known)})


def check_model(facts: ServedFacts, model: str | None) -> None:
    """Refuse a ``--model`` the server does not serve (a served name, a literal alias, or a glob alias's match)."""
    if model is None or model in settings.names(facts):
        return
    if any(fnmatch.fnmatchcase(model, a) for a in facts.aliases if is_pattern(a)):
        return
    raise ModelNotServed(
        f"port {facts.port} serves no model named {model!r}",
        details={"port": facts.port, "model": model, "served": list(settings.names(facts))},
    )


def agent_launch(
    agent: str, facts: ServedFacts, model: str | None, binary: str, args: list[str], base: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """Return the argv and environment that start ``agent`` against the server, given the inherited ``base``.

    Codex gets its provider as ``-c`` overrides before the user's arguments (so ``-- exec ...`` still works),
    whose ``auth`` command reads a keyed server's key from its key file: the key is in neither argv nor the
    environment. Claude Code's and opencode's key travels in the environment, never in argv.
    """
    env = dict(base)
    argv = [binary]
    if agent == "claude":
        for name in settings.CLAUDE_UNSET:
            env.pop(name, None)
        env.update(settings.claude_env(facts, model))
    elif agent == "codex":
        env.update(settings.codex_env(facts))
        argv += settings.codex_overrides(facts, model)
    else:
        env.update(settings.opencode_env(facts, model))
    return [*argv, *args], env


def find_binary(agent: str, given: str | None) -> str:
    """Return the agent's executable: ``given`` (``--agent-bin``), else the agent's command on PATH."""
    if given is not None:
        path = Path(given).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise AgentNotFound(f"--agent-bin {given} is not an executable file", details={"path": given})
        return str(path.absolute())
    found = shutil.which(agent)
    if found is None:
        raise AgentNotFound(f"{agent} is not on PATH", details={"agent": agent, "path": os.environ.get("PATH", "")})
    return found


def exec_agent(argv: list[str], env: dict[str, str]) -> NoReturn:
    """Become the agent (exec): it inherits stdin, stdout and the terminal, and its exit status is ours."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)
