"""The pinned table of agent settings (plan/agent_settings.py) and the refusals of `run` and `wire env`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mlx_agent.errors.commands import AgentNotFound, ModelNotServed, NoServer, UnknownAgent
from mlx_agent.plan import agent_settings as settings
from mlx_agent.plan.agent_settings import ServedFacts
from mlx_agent.supervise import agent_run
from tests.agents_support import AGENT_PACKAGES
from tests.conftest import LAUNCHER, REPO_ROOT

BASE = "http://127.0.0.1:8123"


def facts(**changes: object) -> ServedFacts:
    """Return a keyed server's facts with a 32k window and a 4096-token reply ceiling, changed by ``changes``."""
    values: dict[str, object] = {
        "base_url": BASE,
        "port": 8123,
        "models": ("local-coder", "helper"),
        "aliases": ("claude-*", "claude-haiku-local"),
        "api_key": "sk-test",
        "key_file": "/keys/front",
        "context_window": 32768,
        "max_output_tokens": 4096,
    }
    values.update(changes)
    return ServedFacts(**values)  # type: ignore[arg-type]


@pytest.mark.fast
def test_checked_versions_are_the_pinned_agents() -> None:
    """The table names the agent versions the real-agent tests install, which are what scripts/install installs."""
    for agent in settings.AGENTS:
        assert AGENT_PACKAGES[agent].endswith("@" + settings.CHECKED[agent])
    assert set(settings.CHECKED) == set(settings.AGENTS)
    install = (REPO_ROOT / "scripts" / "install").read_text()
    assert f'wanted="{" ".join(AGENT_PACKAGES.values())}"' in install


@pytest.mark.fast
def test_claude_env_points_every_model_slot_at_the_server() -> None:
    """Claude Code gets the URL, the key as its token, the served name in each slot and a haiku alias for haiku."""
    env = settings.claude_env(facts(), None)
    assert env["ANTHROPIC_BASE_URL"] == BASE and env["ANTHROPIC_AUTH_TOKEN"] == "sk-test"
    assert {env[k] for k in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL")} == {
        "local-coder"
    }
    assert env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == env["ANTHROPIC_SMALL_FAST_MODEL"] == "claude-haiku-local"
    assert env["CLAUDE_CODE_SUBAGENT_MODEL"] == "local-coder"
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0" and env["CLAUDE_CODE_TOTAL_TOKENS_REMINDER"] == "off"
    assert "ANTHROPIC_API_KEY" not in env and "ANTHROPIC_API_KEY" in settings.CLAUDE_UNSET


@pytest.mark.fast
def test_claude_env_with_a_model_uses_it_everywhere() -> None:
    """A chosen --model fills every slot, the haiku one too."""
    env = settings.claude_env(facts(), "helper")
    slots = (
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
        "CLAUDE_CODE_SUBAGENT_MODEL",
    )
    assert {env[k] for k in slots} == {"helper"}


@pytest.mark.fast
def test_claude_compaction_follows_the_window() -> None:
    """A window of 100k or more is given as the compaction window; a smaller one as a percent of the assumed 200k."""
    big = settings.claude_env(facts(context_window=131072, max_output_tokens=None), None)
    assert big["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "131072" and "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE" not in big
    assert big["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "32000"  # a quarter of the window, at most its default ask
    small = settings.claude_env(facts(), None)
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in small
    assert small["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] == str((32768 - 4096) * 100 // 200000)
    assert small["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "4096"


@pytest.mark.fast
def test_claude_env_without_a_key_sends_a_placeholder() -> None:
    """A server without keys takes any token; Claude Code refuses to start without one."""
    assert settings.claude_env(facts(api_key=None, key_file=None), None)["ANTHROPIC_AUTH_TOKEN"] == "unused"


@pytest.mark.fast
def test_codex_provider_reads_the_key_from_its_file() -> None:
    """Codex's provider uses the Responses API and reads the key by an auth command on the key file: no key, no var."""
    provider = settings.codex_provider(facts(), None)
    assert provider["model"] == "local-coder" and provider["model_provider"] == settings.CODEX_PROVIDER_ID
    table = provider["model_providers"][settings.CODEX_PROVIDER_ID]
    assert table == {
        "name": "mlx-agent",
        "base_url": BASE + "/v1",
        "wire_api": "responses",
        "auth": {"command": "grep", "args": ["-m1", "-v", "-E", "^[[:space:]]*(#|$)", "/keys/front"]},
    }
    assert "env_key" not in table  # Codex refuses auth combined with env_key
    assert provider["model_context_window"] == 32768
    assert provider["model_auto_compact_token_limit"] == 32768 - 4096  # the reply ceiling needs more than 10%
    assert "sk-test" not in json.dumps(provider)
    assert settings.codex_env(facts()) == {}
    # A file of several keys is fine too: the command prints the first, the one the other fields name.
    assert settings.codex_auth(facts(single_key=False)) == table["auth"]


def test_codex_auth_command_prints_the_key_the_front_reads(tmp_path: Path) -> None:
    """The auth command, run as Codex runs it (an argv, no shell), prints the first key as the front reads it."""
    from mlx_agent.gateway.door.config import read_private_lines

    keys = tmp_path / "it's keys"
    keys.write_text("# the front's keys\r\n\n   \n  # indented comment\n\t sk-first \r\nsk-second\n")
    keys.chmod(0o600)
    auth = settings.codex_auth(facts(key_file=str(keys)))
    assert auth is not None
    done = subprocess.run([auth["command"], *auth["args"]], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == read_private_lines(keys, "key file")[0] == "sk-first"  # Codex trims the output
    assert shlex.join(settings.KEY_READER) + " " == settings.KEY_COMMAND  # apiKeyHelper runs the same command


@pytest.mark.fast
def test_codex_without_a_key_needs_no_variable() -> None:
    """Without keys Codex gets no auth and no env_key (it would refuse to start with the variable unset)."""
    bare = facts(api_key=None, key_file=None, max_output_tokens=None)
    table = settings.codex_provider(bare, None)["model_providers"][settings.CODEX_PROVIDER_ID]
    assert "env_key" not in table and "auth" not in table
    assert settings.codex_env(bare) == {}
    assert settings.codex_provider(bare, None)["model_auto_compact_token_limit"] == int(32768 * 0.9)


@pytest.mark.fast
def test_codex_key_without_a_file_falls_back_to_the_variable() -> None:
    """Facts with a key but no key file to read name the key's variable by env_key, and give its value."""
    fileless = facts(key_file=None)
    table = settings.codex_provider(fileless, None)["model_providers"][settings.CODEX_PROVIDER_ID]
    assert table["env_key"] == "MLX_AGENT_API_KEY" and "auth" not in table
    assert settings.codex_env(fileless) == {"MLX_AGENT_API_KEY": "sk-test"}


@pytest.mark.fast
def test_codex_overrides_read_as_toml_give_the_provider() -> None:
    """Each `-c key=value` is a TOML dotted assignment; together they parse to exactly ``codex_provider``."""
    args = settings.codex_overrides(facts(), "claude-haiku-local")
    assert args[::2] == ["-c"] * (len(args) // 2)
    parsed = tomllib.loads("\n".join(args[1::2]))
    assert parsed == settings.codex_provider(facts(), "claude-haiku-local")
    assert "sk-test" not in " ".join(args) and 'model_providers.mlx_agent.auth.command="grep"' in args


@pytest.mark.fast
def test_opencode_provider_references_the_key() -> None:
    """The opencode provider lists every served id with limits, and reads the key from its file or its variable."""
    entry = settings.opencode_provider(facts(), None)[settings.OPENCODE_PROVIDER_ID]
    assert entry["npm"] == "@ai-sdk/openai-compatible" and entry["options"]["baseURL"] == BASE + "/v1"
    assert list(entry["models"]) == ["local-coder", "helper", "claude-haiku-local"]  # no glob alias
    assert entry["models"]["helper"]["limit"] == {"context": 32768, "output": 4096}
    assert entry["options"]["apiKey"] == "{file:/keys/front}"
    several = settings.opencode_provider(facts(single_key=False), None)[settings.OPENCODE_PROVIDER_ID]
    assert several["options"]["apiKey"] == "{env:MLX_AGENT_API_KEY}"
    unknown = settings.opencode_provider(facts(context_window=None, max_output_tokens=None), None)
    limit = unknown[settings.OPENCODE_PROVIDER_ID]["models"]["local-coder"]["limit"]
    assert limit["output"] > 0  # a custom model without a limit gets 0 and fails


@pytest.mark.fast
def test_opencode_env_is_an_inline_config() -> None:
    """`run opencode` writes no file: the config rides in OPENCODE_CONFIG_CONTENT, the key in its variable."""
    env = settings.opencode_env(facts(), "helper")
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == "mlx-agent/helper" and config["$schema"] == "https://opencode.ai/config.json"
    assert "sk-test" not in env["OPENCODE_CONFIG_CONTENT"] and env["MLX_AGENT_API_KEY"] == "sk-test"


@pytest.mark.fast
def test_client_env_and_wire_settings_by_kind() -> None:
    """Generic clients get both APIs' variables; openai and anthropic get their own only."""
    env, unset, argv = settings.wire_settings(facts(), None, None)
    assert env == {
        "OPENAI_BASE_URL": BASE + "/v1",
        "OPENAI_API_KEY": "sk-test",
        "ANTHROPIC_BASE_URL": BASE,
        "ANTHROPIC_API_KEY": "sk-test",
    }
    assert (unset, argv) == ([], [])
    assert set(settings.wire_settings(facts(), "openai", None)[0]) == {"OPENAI_BASE_URL", "OPENAI_API_KEY"}
    assert set(settings.wire_settings(facts(), "anthropic", None)[0]) == {"ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"}
    claude = settings.wire_settings(facts(), "claude", None)
    assert claude[1] == list(settings.CLAUDE_UNSET)


def sourced(text: str, tmp_path: Path, *names: str) -> dict[str, str | None]:
    """Return the variables ``names`` after sh sources ``text`` (a real sh)."""
    script = tmp_path / "settings.sh"
    script.write_text(text)
    printer = "import json, os, sys; print(json.dumps({n: os.environ.get(n) for n in sys.argv[1:]}))"
    done = subprocess.run(
        ["sh", "-c", f'. "$0" && exec "{sys.executable}" -c "$1" "$@"', str(script), printer, *names],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "ANTHROPIC_API_KEY": "a real key"},
        check=True,
    )
    found: dict[str, str | None] = json.loads(done.stdout)
    return found


def test_sh_lines_quote_any_value_and_read_the_key_live(tmp_path: Path) -> None:
    """The sh lines keep quotes, dollars and newlines; a hidden key is read from the key file (its first key)."""
    keys = tmp_path / "keys"
    keys.write_text("# the front's keys\n\n  sk-first  \nsk-second\n")
    env = {"A": 'it\'s $HOME `x` "q"\nline', "MLX_AGENT_API_KEY": "sk-first"}
    text = settings.shell_text(env, ["ANTHROPIC_API_KEY"], [], "sh", str(keys), frozenset({"MLX_AGENT_API_KEY"}))
    assert "sk-first" not in text
    seen = sourced(text, tmp_path, "A", "MLX_AGENT_API_KEY", "ANTHROPIC_API_KEY")
    assert seen["A"] == env["A"] and seen["ANTHROPIC_API_KEY"] is None
    assert seen["MLX_AGENT_API_KEY"] is not None and seen["MLX_AGENT_API_KEY"].strip() == "sk-first"


@pytest.mark.fast
def test_fish_lines_and_codex_arguments() -> None:
    """The fish lines use set -gx with fish quoting; Codex's overrides are shown as a command line to run."""
    text = settings.shell_text({"K": "a'b\\c"}, ["X"], ["-c", 'model="m"'], "fish", None, frozenset())
    lines = text.splitlines()
    assert lines[0] == "set -e X" and lines[1] == "set -gx K 'a\\'b\\\\c'"
    assert lines[-1] == "# codex -c 'model=\"m\"'"  # a safe word is left bare


@pytest.mark.fast
def test_key_is_read_as_the_front_reads_it(tmp_path: Path) -> None:
    """The first key of the front's key file is the one given; a file of several is not one key."""
    keys = tmp_path / "keys"
    keys.write_text("# comment\nsk-one\nsk-two\n")
    keys.chmod(0o600)
    assert agent_run._key(str(keys)) == ("sk-one", False)
    keys.write_text("sk-only\n")
    assert agent_run._key(str(keys)) == ("sk-only", True)
    assert agent_run._key(None) == (None, True)


@pytest.mark.fast
def test_unknown_agent_and_model_are_refused() -> None:
    """An agent with no settings is unknown_agent; a model the server does not serve is model_not_served."""
    with pytest.raises(UnknownAgent) as agent:
        agent_run.check_agent("aider")
    assert agent.value.details["agents"] == list(settings.AGENTS)
    agent_run.check_model(facts(), "claude-sonnet-4-5")  # a glob alias's match is served
    agent_run.check_model(facts(), "helper")
    with pytest.raises(ModelNotServed) as model:
        agent_run.check_model(facts(), "gpt-5")
    assert model.value.details["served"] == ["local-coder", "helper", "claude-haiku-local"]


@pytest.mark.fast
def test_missing_agent_binary_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No agent on PATH, or an --agent-bin that is not executable, is agent_not_found."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AgentNotFound):
        agent_run.find_binary("claude", None)
    plain = tmp_path / "claude"
    plain.write_text("not executable")
    with pytest.raises(AgentNotFound):
        agent_run.find_binary("claude", str(plain))


@pytest.mark.fast
def test_no_server_on_the_port_is_refused(tmp_path: Path) -> None:
    """A port with no receipt of ours is no_server, naming where it looked."""
    with pytest.raises(NoServer) as refused:
        agent_run.served_facts(tmp_path, 8123)
    assert refused.value.details == {"port": 8123, "receipts_dir": str(tmp_path)}


@pytest.mark.parametrize(
    ("args", "code", "rc"),
    [
        (["run", "aider", "--port", "8123", "--json"], "unknown_agent", 2),
        (["run", "claude", "--port", "8123", "--json", "--", "-p", "hi"], "no_server", 1),  # after --: the agent's
        (["wire", "env", "--port", "8123", "--agent", "aider", "--json"], "unknown_agent", 2),
        (["wire", "env", "--port", "8123", "--shell", "json"], "no_server", 1),
    ],
)
def test_cli_refusals_are_envelopes(tmp_path: Path, args: list[str], code: str, rc: int) -> None:
    """`run` and `wire env` refuse with the stable code in the JSON envelope and its exit status."""
    env = {**os.environ, "MLX_AGENT_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, str(LAUNCHER), *args], capture_output=True, text=True, env=env)
    doc = json.loads(done.stdout)
    assert (done.returncode, doc["status"], doc["error"]["code"]) == (rc, "error", code), done.stdout + done.stderr


def test_only_claude_is_told_what_auto_mode_loses() -> None:
    """`run`/`wire` tell a Claude Code user that auto mode's server-side check is gone and what happens instead."""
    [note] = settings.agent_notes("claude")
    assert "auto mode" in note and "safeguards" in note and "not available on a local model" in note
    assert "asks for your approval" in note and "exits 1" in note  # what the pinned Claude Code then does
    assert all(settings.agent_notes(other) == [] for other in ("codex", "opencode", "openai", None))
