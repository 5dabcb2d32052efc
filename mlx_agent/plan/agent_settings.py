"""What each coding agent needs to use a served model, from the live server's facts: one pinned table of names.

Pure: no I/O. The caller reads the live server (``supervise/agent_run.py``) and passes its ``ServedFacts``;
``mlx-agent run`` puts these settings in the agent's environment and argv, ``mlx-agent wire env`` prints them,
and ``mlx-agent wire`` writes them into the agent's own config file.

Every variable and config key below was read in the client named, at the version in ``CHECKED``:

- Claude Code: its settings docs (code.claude.com/docs/en/settings, "Environment variables") and the names
  the pinned bundle reads (``.cache/agents/node_modules/@anthropic-ai/claude-code/bin/claude.exe``: each name
  below occurs in its env-var registry). ``CLAUDE_CODE_ATTRIBUTION_HEADER=0`` stops the per-turn
  ``x-anthropic-billing-header`` block (it changes every turn, so it would bust the prompt cache; the front
  also drops it); ``CLAUDE_CODE_TOTAL_TOKENS_REMINDER=off`` stops the token countdown reminder (one of
  ``off|infinite|fixed|countdown|padded-countdown`` in the bundle), which also changes every turn.
- Codex CLI: its config reference (developers.openai.com/codex/config-reference: ``model_providers.<id>``
  with ``name``, ``base_url``, ``wire_api``, ``env_key``; ``model_context_window``,
  ``model_auto_compact_token_limit``) and ``codex --help`` of the pinned binary (``-c key=value`` parses the
  value as TOML; ``-p/--profile NAME`` layers ``$CODEX_HOME/NAME.config.toml`` on the base config). The
  provider's ``auth`` table (``command``, ``args``, ``timeout_ms``, ``refresh_interval_ms``, ``cwd``: the
  command's trimmed stdout is sent as ``Authorization: Bearer``, cached 300000 ms and rerun after a 401;
  not combinable with ``env_key``) is in the pinned binary's messages ("provider auth.command must not be
  empty", "provider auth cannot be combined with ...") and openai/codex's ``ModelProviderAuthInfo``
  (PR 16288); the real binary was seen sending the key file's first key that way, from config.toml and from
  ``-c``. Its ``credential_file`` belongs to the Vertex AI provider (a Google credential), not to this one.
- opencode: its config docs (opencode.ai/docs/providers, "Custom provider"; schema opencode.ai/config.json):
  ``provider.<id>`` with ``npm: "@ai-sdk/openai-compatible"``, ``name``, ``options.baseURL``,
  ``options.apiKey`` (which takes ``{env:VAR}`` and ``{file:PATH}`` substitutions), ``models.<id>.limit``
  ``{context, output}``.
- Any client: the OpenAI SDKs read ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``, the Anthropic SDKs
  ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``.

The key: never written into a file or argv. Where the client can read the server's key file itself it is
given a reference to that file (Claude Code ``apiKeyHelper``, Codex ``auth.command``, opencode
``{file:...}``); otherwise the value goes in an environment variable; ``KEY_VARS`` names every variable that
holds it, so a printer can show a reference instead of the value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlx_agent.agent_names import compact_limit, is_pattern

AGENTS: tuple[str, ...] = ("claude", "codex", "opencode")
# `wire env --agent` also takes the two generic client kinds.
CLIENTS: tuple[str, ...] = (*AGENTS, "openai", "anthropic")

# The client versions the names in this module were checked against (tests/agents_support.py pins the first two).
# opencode's names were checked in its docs for 1.18.33 (the registry's current release); it is not installed here.
CHECKED: dict[str, str] = {"claude": "2.1.332", "codex": "0.171.0", "opencode": "1.18.33"}

# Claude Code's environment variables (CHECKED["claude"]).
CLAUDE_BASE_URL = "ANTHROPIC_BASE_URL"
CLAUDE_TOKEN = "ANTHROPIC_AUTH_TOKEN"  # sent as `Authorization: Bearer`; the front takes it; no key prompt
CLAUDE_MODEL = "ANTHROPIC_MODEL"
CLAUDE_OPUS = "ANTHROPIC_DEFAULT_OPUS_MODEL"
CLAUDE_SONNET = "ANTHROPIC_DEFAULT_SONNET_MODEL"
CLAUDE_HAIKU = "ANTHROPIC_DEFAULT_HAIKU_MODEL"
CLAUDE_SMALL_FAST = "ANTHROPIC_SMALL_FAST_MODEL"  # the older name of the haiku slot, still read
CLAUDE_SUBAGENT = "CLAUDE_CODE_SUBAGENT_MODEL"
CLAUDE_MAX_OUTPUT = "CLAUDE_CODE_MAX_OUTPUT_TOKENS"
CLAUDE_COMPACT_WINDOW = "CLAUDE_CODE_AUTO_COMPACT_WINDOW"  # read as at least 100000
CLAUDE_COMPACT_PCT = "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"  # percent of the 200000 it assumes for an unknown model
CLAUDE_ATTRIBUTION = "CLAUDE_CODE_ATTRIBUTION_HEADER"
CLAUDE_TOKENS_REMINDER = "CLAUDE_CODE_TOTAL_TOKENS_REMINDER"
CLAUDE_QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
# Variables that would send Claude Code elsewhere or with another credential: `run` removes them from the
# inherited environment, `wire env` unsets them.
CLAUDE_UNSET: tuple[str, ...] = (
    "ANTHROPIC_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
)
# What `run claude`, `wire claude` and `wire env --agent claude` tell the user (gateway/anthropic/safeguards.py:
# why the front refuses the field; what Claude Code then does was seen with the pinned binary, -p and tmux).
CLAUDE_AUTO_MODE_NOTE = (
    "Claude Code's auto mode: its server-side check of risky tool calls (Anthropic's classifier, the "
    "`safeguards` field) is not available on a local model. The server refuses the field once per session "
    "and Claude Code goes on without the check: an action that needs it asks for your approval "
    "(interactive) or is not run (claude -p, which then exits 1); actions auto mode allows without it, "
    "such as reads, still run. Set CLAUDE_CODE_AUTO_MODE_SERVER=0 to have Claude Code judge those actions "
    "with its own classifier on the served model instead (side requests, each with a prompt of about 140,000 "
    "characters, for every such action)."
)
CLAUDE_ASSUMED_WINDOW = 200000  # what Claude Code assumes for a model name it does not know
CLAUDE_MIN_COMPACT_WINDOW = 100000
CLAUDE_DEFAULT_OUTPUT = 32000  # what it asks by default; more than a small window can spare

# Codex CLI's config keys (CHECKED["codex"]).
CODEX_PROVIDER_ID = "mlx_agent"  # a dotted `-c` path splits on '.', so no dot; '_' is a bare TOML key
CODEX_PROVIDER_NAME = "mlx-agent"  # any name but "OpenAI": Codex then compacts by itself (README, Codex)
CODEX_PROFILE = "mlx-agent"  # `codex -p mlx-agent` layers $CODEX_HOME/mlx-agent.config.toml
CODEX_WIRE_API = "responses"

# opencode's config (CHECKED["opencode"]).
OPENCODE_PROVIDER_ID = "mlx-agent"
OPENCODE_NPM = "@ai-sdk/openai-compatible"
OPENCODE_SCHEMA = "https://opencode.ai/config.json"
OPENCODE_CONFIG_VAR = "OPENCODE_CONFIG_CONTENT"  # inline config JSON, merged over the files: how `run` needs none
# A custom model without ``limit`` gets a reply limit of 0 and fails (opencode issue 22587): always give one.
OPENCODE_FALLBACK_WINDOW = 32768

# Generic clients.
OPENAI_BASE_URL = "OPENAI_BASE_URL"
OPENAI_API_KEY = "OPENAI_API_KEY"
ANTHROPIC_BASE_URL = "ANTHROPIC_BASE_URL"
ANTHROPIC_API_KEY = "ANTHROPIC_API_KEY"

NO_KEY = "unused"  # a server without keys takes any; clients refuse an empty one
# The variable a client reads the key from when it cannot read the key file (opencode run from an inline config).
KEY_VAR = "MLX_AGENT_API_KEY"
# Every variable any function here fills with the API key.
KEY_VARS: frozenset[str] = frozenset({CLAUDE_TOKEN, KEY_VAR, OPENAI_API_KEY, ANTHROPIC_API_KEY})
KEY_ENV_REF = "{env:" + KEY_VAR + "}"  # opencode's reference to the key variable
# Prints the key file's first key as the front reads it: the first line that is neither blank nor a comment
# (the front strips each line; Claude Code and Codex trim the output). An argv, so Codex runs it with no shell.
KEY_READER: tuple[str, ...] = ("grep", "-m1", "-v", "-E", "^[[:space:]]*(#|$)")


@dataclass(frozen=True)
class ServedFacts:
    """What a live server of ours offers: where, under which names, behind which key, with which limits."""

    base_url: str  # "http://127.0.0.1:8080", no trailing slash
    port: int
    models: tuple[str, ...]  # served names, the first is the main model
    aliases: tuple[str, ...]  # every alias, globs (``claude-*``) too
    api_key: str | None  # the first key of the key file, None when the server takes any
    key_file: str | None
    context_window: int | None  # the main model's
    max_output_tokens: int | None  # the main model's reply ceiling (window-bounded), None when unset
    single_key: bool = True  # the key file holds one key, so a client may read the whole file as the key


def names(facts: ServedFacts) -> tuple[str, ...]:
    """Return every model id a client may send: the served names, then the literal aliases."""
    return (*facts.models, *(a for a in facts.aliases if not is_pattern(a)))


def main_model(facts: ServedFacts, model: str | None) -> str:
    """Return the model an agent should use: ``model`` when given (the caller checked it), else the main one."""
    return model if model is not None else facts.models[0]


def _key(facts: ServedFacts) -> str:
    return facts.api_key if facts.api_key is not None else NO_KEY


def _small(facts: ServedFacts, main: str) -> str:
    """Return the model for Claude Code's haiku slot: a served id naming haiku if there is one, else ``main``."""
    return next((n for n in names(facts) if "haiku" in n.lower()), main)


def agent_notes(agent: str | None) -> list[str]:
    """Return what the user must know about ``agent`` on a local server (what it loses), to print where they are."""
    return [CLAUDE_AUTO_MODE_NOTE] if agent == "claude" else []


def claude_output(facts: ServedFacts) -> int | None:
    """Return the reply limit Claude Code should ask: the ceiling, else a quarter of the window, at most 32000."""
    if facts.max_output_tokens is not None:
        return min(facts.max_output_tokens, CLAUDE_DEFAULT_OUTPUT)
    if facts.context_window is not None:
        return min(max(facts.context_window // 4, 1), CLAUDE_DEFAULT_OUTPUT)
    return None


def claude_env(facts: ServedFacts, model: str | None) -> dict[str, str]:
    """Return the environment Claude Code needs for this server (its settings file's ``env`` block takes it too)."""
    main = main_model(facts, model)
    small = _small(facts, main) if model is None else main
    env = {
        CLAUDE_BASE_URL: facts.base_url,
        CLAUDE_TOKEN: _key(facts),
        CLAUDE_MODEL: main,
        CLAUDE_OPUS: main,
        CLAUDE_SONNET: main,
        CLAUDE_HAIKU: small,
        CLAUDE_SMALL_FAST: small,
        CLAUDE_SUBAGENT: main,
        CLAUDE_ATTRIBUTION: "0",
        CLAUDE_TOKENS_REMINDER: "off",
        **CLAUDE_QUIET,
    }
    output = claude_output(facts)
    if output is not None:
        env[CLAUDE_MAX_OUTPUT] = str(output)
    window = facts.context_window
    if window is not None and window >= CLAUDE_MIN_COMPACT_WINDOW:
        env[CLAUDE_COMPACT_WINDOW] = str(window)
    elif window is not None:
        # Compact before the real window is full: the percent of the assumed window that leaves the reply room.
        room = window - (output or 0)
        env[CLAUDE_COMPACT_PCT] = str(max(1, room * 100 // CLAUDE_ASSUMED_WINDOW))
    return env


def codex_compact_limit(facts: ServedFacts) -> int | None:
    """Return where Codex should compact on this server (``compact_limit`` of the main model's window and ceiling)."""
    return compact_limit(facts.context_window, facts.max_output_tokens)


def codex_auth(facts: ServedFacts) -> dict[str, Any] | None:
    """Return the provider's ``auth`` table: Codex runs ``KEY_READER`` on the key file and sends what it prints.

    None for a server without keys, or for facts without a key file (then ``env_key`` names ``KEY_VAR``).
    """
    if facts.api_key is None or facts.key_file is None:
        return None
    return {"command": KEY_READER[0], "args": [*KEY_READER[1:], facts.key_file]}


def codex_provider(facts: ServedFacts, model: str | None) -> dict[str, Any]:
    """Return the config.toml settings that point Codex at this server (top-level keys and the provider table).

    A keyed server's key is read from its key file by the provider's ``auth`` command, so the settings hold
    no key and Codex needs no variable; a server without keys gets neither, and Codex sends no credential.
    """
    provider: dict[str, Any] = {
        "name": CODEX_PROVIDER_NAME,
        "base_url": facts.base_url + "/v1",
        "wire_api": CODEX_WIRE_API,
    }
    auth = codex_auth(facts)
    if auth is not None:
        provider["auth"] = auth
    elif facts.api_key is not None:
        provider["env_key"] = KEY_VAR  # no file to read: ``codex_env`` gives the variable
    settings: dict[str, Any] = {
        "model": main_model(facts, model),
        "model_provider": CODEX_PROVIDER_ID,
        "model_providers": {CODEX_PROVIDER_ID: provider},
    }
    if facts.context_window is not None:
        settings["model_context_window"] = facts.context_window
    limit = codex_compact_limit(facts)
    if limit is not None:
        settings["model_auto_compact_token_limit"] = limit
    return settings


def key_env(facts: ServedFacts) -> dict[str, str]:
    """Return ``KEY_VAR`` holding the key, for a client that reads it from there (none without a key)."""
    return {KEY_VAR: facts.api_key} if facts.api_key is not None else {}


def codex_env(facts: ServedFacts) -> dict[str, str]:
    """Return the environment Codex needs beside its config: nothing when its ``auth`` command reads the key file."""
    return {} if codex_auth(facts) is not None else key_env(facts)


def codex_overrides(facts: ServedFacts, model: str | None) -> list[str]:
    """Return ``codex_provider`` as Codex's ``-c key=value`` arguments (values in TOML), so no file is written."""
    import json

    def toml(value: Any) -> str:
        # A JSON string of printable text is a TOML basic string; ints are the same in both; so is an array.
        if isinstance(value, list):
            return "[" + ", ".join(toml(item) for item in value) + "]"
        return json.dumps(value, ensure_ascii=True) if isinstance(value, str) else str(int(value))

    args: list[str] = []

    def flatten(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                flatten(f"{prefix}.{key}" if prefix else key, inner)
        else:
            args.extend(["-c", f"{prefix}={toml(value)}"])

    flatten("", codex_provider(facts, model))
    return args


def opencode_provider(facts: ServedFacts, model: str | None, *, key_in_env: bool = False) -> dict[str, Any]:
    """Return opencode.json's ``provider`` entry for this server (``{OPENCODE_PROVIDER_ID: {...}}``).

    The key is a reference, never the key: ``{file:PATH}`` to the server's key file when it holds one key
    (opencode reads it at start), else (or with ``key_in_env``) ``{env:MLX_AGENT_API_KEY}`` (``key_env``).
    """
    window = facts.context_window or OPENCODE_FALLBACK_WINDOW
    output = min(facts.max_output_tokens or window, window)
    chosen = main_model(facts, model)
    ids = [chosen, *(n for n in names(facts) if n != chosen)]
    models = {n: {"name": n, "limit": {"context": window, "output": output}} for n in ids}
    options: dict[str, Any] = {"baseURL": facts.base_url + "/v1"}
    if facts.api_key is not None:
        use_file = facts.key_file is not None and facts.single_key and not key_in_env
        options["apiKey"] = "{file:" + str(facts.key_file) + "}" if use_file else KEY_ENV_REF
    return {
        OPENCODE_PROVIDER_ID: {
            "npm": OPENCODE_NPM,
            "name": CODEX_PROVIDER_NAME,
            "options": options,
            "models": models,
        }
    }


def opencode_model(facts: ServedFacts, model: str | None) -> str:
    """Return opencode's ``model`` setting (``provider/model``) for this server."""
    return f"{OPENCODE_PROVIDER_ID}/{main_model(facts, model)}"


def opencode_env(facts: ServedFacts, model: str | None) -> dict[str, str]:
    """Return the environment that points opencode at this server with no file: its inline config and the key."""
    import json

    config = {
        "$schema": OPENCODE_SCHEMA,
        "provider": opencode_provider(facts, model, key_in_env=True),
        "model": opencode_model(facts, model),
    }
    return {OPENCODE_CONFIG_VAR: json.dumps(config, sort_keys=True), **key_env(facts)}


def client_env(facts: ServedFacts, model: str | None) -> dict[str, str]:
    """Return the variables any OpenAI- or Anthropic-compatible client (the SDKs and most tools) reads."""
    del model  # the SDKs read no model variable; kept for the table's one signature
    return {
        OPENAI_BASE_URL: facts.base_url + "/v1",
        OPENAI_API_KEY: _key(facts),
        ANTHROPIC_BASE_URL: facts.base_url,
        ANTHROPIC_API_KEY: _key(facts),
    }


def wire_settings(
    facts: ServedFacts, client: str | None, model: str | None
) -> tuple[dict[str, str], list[str], list[str]]:
    """Return what ``wire env`` prints for ``client`` (None: any OpenAI or Anthropic client): env, unset, argv.

    The argv is what the client needs on its command line besides (Codex's ``-c`` overrides).
    """
    if client == "claude":
        return claude_env(facts, model), list(CLAUDE_UNSET), []
    if client == "codex":
        return codex_env(facts), [], codex_overrides(facts, model)
    if client == "opencode":
        return opencode_env(facts, model), [], []
    env = client_env(facts, model)
    if client == "openai":
        env = {k: v for k, v in env.items() if k.startswith("OPENAI_")}
    elif client == "anthropic":
        env = {k: v for k, v in env.items() if k.startswith("ANTHROPIC_")}
    return env, [], []


# ``KEY_READER`` as a shell command line (``shlex.join``, a test holds them equal), the key file's quoted path to
# follow: Claude Code's apiKeyHelper and the sh/fish lines.
KEY_COMMAND = "grep -m1 -v -E '^[[:space:]]*(#|$)' "


def _fish_quote(text: str) -> str:
    import re

    if re.fullmatch(r"[\w@%+=:,./-]+", text, flags=re.ASCII):
        return text  # nothing fish would read specially
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def shell_text(
    env: dict[str, str], unset: list[str], argv: list[str], shell: str, key_file: str | None, hide: frozenset[str]
) -> str:
    """Return ``env`` as ``sh`` or ``fish`` lines; a variable in ``hide`` reads the key from ``key_file`` instead.

    Codex's overrides (``argv``) become a comment showing the command line, since no variable carries them.
    """
    import shlex

    quote = shlex.quote if shell == "sh" else _fish_quote
    lines: list[str] = []
    for name in unset:
        lines.append(f"unset {name}" if shell == "sh" else f"set -e {name}")
    for name, value in env.items():
        if name in hide and key_file is not None:
            command = KEY_COMMAND + quote(key_file)
            lines.append(f'export {name}="$({command})"' if shell == "sh" else f"set -gx {name} ({command})")
        elif shell == "sh":
            lines.append(f"export {name}={quote(value)}")
        else:
            lines.append(f"set -gx {name} {quote(value)}")
    if argv:
        lines.append("# Codex takes its provider on the command line (or from config.toml: mlx-agent wire codex):")
        lines.append("# codex " + " ".join(quote(a) for a in argv))
    return "\n".join(lines) + "\n"
