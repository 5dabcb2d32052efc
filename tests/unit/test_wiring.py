"""The wiring engine: format-keeping edits of real-looking agent configs, refusals, byte-identical undo, drift."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mlx_agent import errors
from mlx_agent.canonical import with_hash
from mlx_agent.errors import commands
from mlx_agent.plan.wired import claims_on_port, read_wired
from mlx_agent.plan.wiring import MAX_CONFIG_BYTES, ConfigFile, Edit, config_files, file_drift, record_stem
from mlx_agent.supervise import wiring
from mlx_agent.supervise.locks import file_lock

pytestmark = pytest.mark.fast

CLAUDE_SETTINGS = """{
  "permissions": {
    "allow": [
      "Bash(git status)",
      "Read(~/notes/**)"
    ],
    "defaultMode": "acceptEdits"
  },
  "env": {
    "EDITOR": "vim"
  },
  "model": "opus",
  "hooks": {}
}
"""

CODEX_CONFIG = """# Codex settings, kept by hand.
model = "o3"  # the hosted default
approval_policy = "on-request"

# Trusted checkouts.
[projects."/home/me/src/app"]
trust_level = "trusted"

[model_providers.azure]
name = "Azure"  # work account
base_url = "https://example.openai.azure.com/openai"
env_key = "AZURE_OPENAI_API_KEY"

[profiles.work]
model = "gpt-5"
model_provider = "azure"
"""

PORT = 8123
SERVER = {
    "port": PORT,
    "base_url": f"http://127.0.0.1:{PORT}",
    "runtime": "mlx_lm",
    "model": "local-coder",
    "served": ["local-coder"],
    "identity": {"pid": 4242, "create_time": 1700000000.5},
}
CLAUDE_EDITS: list[Edit] = [
    (("env", "ANTHROPIC_BASE_URL"), SERVER["base_url"]),
    (("env", "ANTHROPIC_MODEL"), "local-coder"),
    (("env", "EDITOR"), "nano"),  # a key the user had: unwire after an edit gives "vim" back
]
CODEX_EDITS: list[Edit] = [
    (("model_providers", "mlx-agent", "name"), "mlx-agent"),
    (("model_providers", "mlx-agent", "base_url"), f"{SERVER['base_url']}/v1"),
    (("model_providers", "mlx-agent", "wire_api"), "responses"),
    (("profiles", "mlx-agent", "model"), "local-coder"),
    (("profiles", "mlx-agent", "model_provider"), "mlx-agent"),
    (("profiles", "mlx-agent", "model_context_window"), 32768),
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Give each test its own MLX_AGENT_HOME (previews and wired records) and return the user's HOME."""
    monkeypatch.setenv("MLX_AGENT_HOME", str(tmp_path / "state"))
    user = tmp_path / "home"
    user.mkdir()
    return user


def sha(path: Path) -> str:
    """Return a file's sha256."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def claude_file(home: Path, text: str | None = CLAUDE_SETTINGS) -> ConfigFile:
    """Write Claude Code's user settings (if ``text``) and return its config file."""
    [cf] = config_files("claude", "user", {"HOME": str(home)}, home)
    if text is not None:
        cf.path.parent.mkdir(parents=True, exist_ok=True)
        cf.path.write_text(text)
    return cf


def codex_file(home: Path, text: str = CODEX_CONFIG) -> ConfigFile:
    """Write Codex's config.toml under CODEX_HOME and return its config file."""
    [cf] = config_files("codex", "user", {"HOME": str(home), "CODEX_HOME": str(home / "codex")}, home, default=True)
    cf.path.parent.mkdir(parents=True)
    cf.path.write_text(text)
    return cf


def wired_dir(home: Path) -> Path:
    """Return the wired records' directory of this test's MLX_AGENT_HOME."""
    return home.parent / "state" / "wired"


def wire(home: Path, agent: str, cf: ConfigFile, edits: list[Edit]) -> dict[str, Any]:
    """Preview and confirm a wiring of one file; return the record written."""
    planned = wiring.preview(wiring.plan_wire(agent, "user", SERVER, [(cf, edits)], wired_dir(home))[0])
    plan, new = wiring.reviewed(
        lambda: wiring.plan_wire(agent, "user", SERVER, [(cf, edits)], wired_dir(home)), planned["preview_hash"]
    )
    return wiring.confirm_wire(plan, new)


def unwire(home: Path, agent: str, cf: ConfigFile) -> dict[str, Any]:
    """Preview and confirm undoing a wiring; return the result."""
    planned = wiring.preview(wiring.plan_unwire(wired_dir(home), agent, "user", [cf])[0])
    plan, new = wiring.reviewed(
        lambda: wiring.plan_unwire(wired_dir(home), agent, "user", [cf]), planned["preview_hash"]
    )
    return wiring.confirm_unwire(plan, new)


def test_claude_settings_keep_their_keys_order_and_indent(home: Path) -> None:
    """The env block gains the wired keys; every other key keeps its place and the file its 2-space indent."""
    cf = claude_file(home)
    plan, new = wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home))
    text = new[str(cf.path)].decode()
    data = json.loads(text)
    assert list(data) == ["permissions", "env", "model", "hooks"]
    assert data["env"] == {"EDITOR": "nano", "ANTHROPIC_BASE_URL": SERVER["base_url"], "ANTHROPIC_MODEL": "local-coder"}
    assert data["permissions"] == json.loads(CLAUDE_SETTINGS)["permissions"]
    [entry] = plan["files"]
    assert entry["normalised"] is False  # this file re-serialises to its own bytes
    assert entry["exists"] is True and entry["sha256_before"] == sha(cf.path)
    changed = [line for line in entry["diff"].splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert sorted(changed) == sorted(
        [
            '-    "EDITOR": "vim"',
            '+    "EDITOR": "nano",',
            f'+    "ANTHROPIC_BASE_URL": "{SERVER["base_url"]}",',
            '+    "ANTHROPIC_MODEL": "local-coder"',
        ]
    )
    assert cf.path.read_text() == CLAUDE_SETTINGS  # a plan writes nothing


def test_json_indent_of_tabs_and_compact_arrays_are_reported(home: Path) -> None:
    """A tab-indented file stays tab-indented; one whose inline array would be re-spread says normalised."""
    cf = claude_file(home, '{\n\t"env": {\n\t\t"A": "1"\n\t}\n}\n')
    plan, new = wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS[:1])], wired_dir(home))
    assert new[str(cf.path)].decode().startswith('{\n\t"env": {\n\t\t"A": "1",\n\t\t"ANTHROPIC_BASE_URL"')
    assert plan["files"][0]["normalised"] is False
    cf = claude_file(home, '{\n  "permissions": {"allow": ["Read"]}\n}\n')
    plan, _ = wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS[:1])], wired_dir(home))
    assert plan["files"][0]["normalised"] is True


def test_codex_toml_keeps_comments_and_tables(home: Path) -> None:
    """A provider and a profile are added as tables; every original line, comments included, stays in order."""
    cf = codex_file(home)
    _, new = wiring.plan_wire("codex", "user", SERVER, [(cf, CODEX_EDITS)], wired_dir(home))
    text = new[str(cf.path)].decode()
    lines = iter(text.splitlines())
    assert all(line in lines for line in CODEX_CONFIG.splitlines())  # each original line, in its order
    # The new provider joins the user's providers, each table still set off by a blank line.
    assert '[model_providers.mlx-agent]\nname = "mlx-agent"' in text and '"responses"\n\n[profiles.work]' in text
    assert text.endswith("model_context_window = 32768\n")
    assert "[model_providers]\n" not in text and "[profiles]\n" not in text  # no empty super-table headers
    import tomllib

    parsed = tomllib.loads(text)
    assert parsed["model_providers"]["mlx-agent"]["wire_api"] == "responses"
    assert parsed["profiles"]["mlx-agent"]["model_context_window"] == 32768
    assert parsed["profiles"]["work"] == {"model": "gpt-5", "model_provider": "azure"}


def test_codex_defaults_go_above_the_first_table(home: Path) -> None:
    """Top-level defaults (``--default``) are set among the top-level keys, not inside the last table."""
    cf = codex_file(home)
    edits: list[Edit] = [(("model",), "local-coder"), (("model_provider",), "mlx-agent")]
    _, new = wiring.plan_wire("codex", "user", SERVER, [(cf, edits)], wired_dir(home))
    text = new[str(cf.path)].decode()
    head = text.split("\n[", 1)[0]
    assert 'model = "local-coder"' in head and 'model_provider = "mlx-agent"' in head
    assert "# Codex settings, kept by hand." in head and "# Trusted checkouts." in text


@pytest.mark.parametrize(
    ("kind", "text", "line"),
    [("claude", '{\n  "env": {\n    "A": "1",\n  }\n}\n', 4), ("codex", 'model = "o3"\n[profiles\nx = 1\n', 2)],
)
def test_a_config_that_does_not_parse_is_refused_with_its_line(home: Path, kind: str, text: str, line: int) -> None:
    """A broken settings file is agent_config_unparsable naming the file and line, and nothing is written."""
    cf = claude_file(home, text) if kind == "claude" else codex_file(home, text)
    with pytest.raises(commands.AgentConfigUnparsable) as caught:
        wiring.plan_wire(kind, "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home))
    assert caught.value.details == {"path": str(cf.path), "line": line, "error": caught.value.details["error"]}
    assert f"{cf.path}:{line}" in caught.value.message
    assert cf.path.read_text() == text and not wired_dir(home).exists()


def test_a_symlink_out_of_the_config_directory_is_refused(home: Path, tmp_path: Path) -> None:
    """A settings file linked to a file outside its directory is config_symlink_escapes; one inside is edited."""
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "settings.json").write_text(CLAUDE_SETTINGS)
    cf = claude_file(home, None)
    cf.path.parent.mkdir()
    cf.path.symlink_to(dotfiles / "settings.json")
    with pytest.raises(commands.ConfigSymlinkEscapes):
        wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home))
    cf.path.unlink()
    (cf.path.parent / "real.json").write_text(CLAUDE_SETTINGS)
    cf.path.symlink_to("real.json")
    wire(home, "claude", cf, CLAUDE_EDITS)
    assert cf.path.is_symlink() and "ANTHROPIC_MODEL" in (cf.path.parent / "real.json").read_text()


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_unwire_of_an_unchanged_file_gives_back_its_bytes_and_mode(home: Path, agent: str) -> None:
    """Wire then unwire: the file's sha256 and mode are what they were, and the record and originals are gone."""
    cf = claude_file(home) if agent == "claude" else codex_file(home)
    cf.path.chmod(0o640)
    before = sha(cf.path)
    record = wire(home, agent, cf, CLAUDE_EDITS if agent == "claude" else CODEX_EDITS)
    assert sha(cf.path) == record["files"][0]["sha256_after"] != before
    assert cf.path.stat().st_mode & 0o777 == 0o640
    backup = Path(record["files"][0]["backup"])
    assert backup.stat().st_mode & 0o777 == 0o600 and backup.parent.stat().st_mode & 0o777 == 0o700
    done = unwire(home, agent, cf)
    assert [f["action"] for f in done["files"]] == ["restore"]
    assert sha(cf.path) == before and cf.path.stat().st_mode & 0o777 == 0o640
    assert not list(wired_dir(home).glob("*.json")) and not backup.exists()


def test_unwire_of_a_file_the_wire_made_removes_it(home: Path) -> None:
    """A settings file that did not exist is made 0600 by the wire and removed by the unwire."""
    cf = claude_file(home, None)
    record = wire(home, "claude", cf, CLAUDE_EDITS[:2])
    assert record["files"][0]["exists"] is False and cf.path.stat().st_mode & 0o777 == 0o600
    assert [f["action"] for f in unwire(home, "claude", cf)["files"]] == ["delete"]
    assert not cf.path.exists()


def test_unwire_after_a_hand_edit_takes_out_only_its_keys(home: Path) -> None:
    """Edited since: wired keys go (a replaced one gets its old value), the user's edits stay, and it says so."""
    cf = codex_file(home)
    wire(home, "codex", cf, CODEX_EDITS)
    text = cf.path.read_text().replace('model = "gpt-5"', 'model = "gpt-5.1"  # bumped')
    text = text.replace("model_context_window = 32768", "model_context_window = 65536")
    cf.path.write_text(text + "\n[tui]\nnotifications = true\n")
    done = unwire(home, "codex", cf)
    [entry] = done["files"]
    assert entry["action"] == "remove_keys"
    assert entry["kept"] == [["profiles", "mlx-agent", "model_context_window"]]
    import tomllib

    parsed = tomllib.loads(cf.path.read_text())
    assert "mlx-agent" not in parsed["model_providers"]
    assert parsed["profiles"]["mlx-agent"] == {"model_context_window": 65536}
    assert parsed["profiles"]["work"]["model"] == "gpt-5.1" and parsed["tui"] == {"notifications": True}
    assert "# Codex settings, kept by hand." in cf.path.read_text() and "# bumped" in cf.path.read_text()

    cf = claude_file(home)
    wire(home, "claude", cf, CLAUDE_EDITS)
    data = json.loads(cf.path.read_text())
    data["theme"] = "dark"
    cf.path.write_text(json.dumps(data, indent=2) + "\n")
    unwire(home, "claude", cf)
    assert json.loads(cf.path.read_text()) == {**json.loads(CLAUDE_SETTINGS), "theme": "dark"}


def test_status_reports_drift_after_a_hand_edit(home: Path) -> None:
    """A wired file is unchanged until edited; then the changed and removed wired keys are listed."""
    cf = claude_file(home)
    record = wire(home, "claude", cf, CLAUDE_EDITS)
    [entry] = record["files"]
    assert file_drift(entry)["state"] == "unchanged"
    data = json.loads(cf.path.read_text())
    data["env"]["ANTHROPIC_MODEL"] = "other"
    del data["env"]["ANTHROPIC_BASE_URL"]
    cf.path.write_text(json.dumps(data, indent=2) + "\n")
    found = file_drift(entry)
    assert found["state"] == "edited"
    assert {(d["key"][1], d["state"]) for d in found["drift"]} == {
        ("ANTHROPIC_MODEL", "changed"),
        ("ANTHROPIC_BASE_URL", "removed"),
    }
    cf.path.unlink()
    assert file_drift(entry)["state"] == "missing"


def test_a_file_changed_after_the_preview_is_preview_stale_naming_it(home: Path) -> None:
    """Confirm refuses preview_stale naming the file edited since the preview, and writes nothing."""
    cf = claude_file(home)
    planned = wiring.preview(wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home))[0])
    cf.path.write_text(CLAUDE_SETTINGS.replace("opus", "sonnet"))
    with pytest.raises(errors.PreviewStale) as caught:
        wiring.reviewed(
            lambda: wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home)),
            planned["preview_hash"],
        )
    assert caught.value.details["files"] == [str(cf.path)] and str(cf.path) in caught.value.message
    assert not wired_dir(home).exists()


def test_the_preview_hash_is_deterministic_and_binds_the_server(home: Path) -> None:
    """The same files and server hash alike; another server process (restarted) hashes otherwise."""
    cf = claude_file(home)

    def hashed(server: dict[str, Any]) -> str:
        plan = wiring.plan_wire("claude", "user", server, [(cf, CLAUDE_EDITS)], wired_dir(home))[0]
        return str(with_hash(plan)["preview_hash"])

    assert hashed(SERVER) == hashed(dict(SERVER))
    assert hashed(SERVER) != hashed({**SERVER, "identity": {"pid": 4243, "create_time": 1700000100.0}})


def test_wiring_twice_and_unwiring_nothing_are_refused(home: Path) -> None:
    """A second wire of the same agent and scope is already_wired; an unwire with no record is not_wired."""
    cf = claude_file(home)
    with pytest.raises(commands.NotWired):
        wiring.plan_unwire(wired_dir(home), "claude", "user", [cf])
    wire(home, "claude", cf, CLAUDE_EDITS)
    with pytest.raises(commands.AlreadyWired):
        wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home))


def test_unknown_agents_and_scopes_are_refused() -> None:
    """An agent not in the table is unknown_agent; Codex has no project scope (wire_scope_unsupported)."""
    with pytest.raises(commands.UnknownAgent) as caught:
        config_files("cursor", "user", {"HOME": "/h"}, Path("/w"))
    assert caught.value.details["agents"] == ["claude", "codex", "opencode"]
    with pytest.raises(commands.WireScopeUnsupported):
        config_files("codex", "project", {"HOME": "/h"}, Path("/w"))
    assert [c.path for c in config_files("opencode", "user", {"HOME": "/h"}, Path("/w"))] == [
        Path("/h/.config/opencode/opencode.json")
    ]
    assert [c.path for c in config_files("claude", "project", {"HOME": "/h"}, Path("/w"))] == [
        Path("/w/.claude/settings.json")
    ]


def test_a_wired_record_claims_its_port_for_its_server(home: Path) -> None:
    """The port_claimed check of serve start reads the record: another model on the port is claimed, the same is not."""
    wire(home, "claude", claude_file(home), CLAUDE_EDITS)
    configs, warnings = read_wired(wired_dir(home))
    assert warnings == []
    assert claims_on_port(configs, PORT, {"mlx_lm"}, {"local-coder"}) == []
    [claim] = claims_on_port(configs, PORT, {"mlx_lm"}, {"other-model"})
    assert claim["base_url"] == SERVER["base_url"] and claim["model"] == "local-coder"
    assert claims_on_port(configs, PORT + 1, {"mlx_lm"}, {"other-model"}) == []
    assert os.stat(wired_dir(home)).st_mode & 0o777 == 0o700


def facts(key: str | None) -> Any:
    """Return the facts of a served model behind ``key`` (None: a server that takes any)."""
    from mlx_agent.plan.agent_settings import ServedFacts

    return ServedFacts(
        base_url=f"http://127.0.0.1:{PORT}",
        port=PORT,
        models=("local-coder",),
        aliases=("claude-*",),
        api_key=key,
        key_file="/keys/it's here" if key else None,
        context_window=32768,
        max_output_tokens=4096,
    )


def test_claude_reads_a_servers_key_from_its_key_file_not_the_settings(home: Path) -> None:
    """A keyed server's key is read by apiKeyHelper from its key file; the settings hold no key, only a command."""
    from mlx_agent.plan import agent_settings as settings
    from mlx_agent.plan.wiring import agent_edits

    files = config_files("claude", "user", {"HOME": str(home)}, home)
    [(_, edits)], warnings = agent_edits("claude", files, facts("sk-secret"), None, False)
    keys = dict(edits)
    assert "sk-secret" not in json.dumps(list(keys.values())) and warnings == settings.agent_notes("claude")
    assert keys[("apiKeyHelper",)] == settings.KEY_COMMAND + "'/keys/it'\"'\"'s here'"
    assert ("env", settings.CLAUDE_TOKEN) not in keys and keys[("env", settings.CLAUDE_BASE_URL)] == SERVER["base_url"]
    [(_, keyless)], _ = agent_edits("claude", files, facts(None), None, False)
    assert dict(keyless)[("env", settings.CLAUDE_TOKEN)] == settings.NO_KEY and ("apiKeyHelper",) not in dict(keyless)


def test_codex_gets_a_provider_and_a_profile_file_or_defaults(home: Path) -> None:
    """Codex: the provider in config.toml and the selecting keys in mlx-agent.config.toml, or all at the top."""
    from mlx_agent.plan.wiring import agent_edits

    env = {"HOME": str(home), "CODEX_HOME": str(home / "codex")}
    files = config_files("codex", "user", env, home)
    assert [f.path.name for f in files] == ["config.toml", "mlx-agent.config.toml"]
    (main, provider), (profile, selecting) = agent_edits("codex", files, facts("k"), None, False)[0]
    assert (main, profile) == (files[0], files[1])
    assert {k[:2] for k, _ in provider} == {("model_providers", "mlx_agent")}
    assert dict(selecting)[("model_provider",)] == "mlx_agent" and dict(selecting)[("model",)] == "local-coder"
    [(only, everything)], warnings = agent_edits("codex", files[:1], facts("k"), None, True)
    assert only == files[0] and {k[0] for k, _ in everything} >= {"model", "model_provider", "model_providers"}
    assert warnings == []  # the key is read from its file, so nothing is left for the user to set


def test_codex_reads_a_servers_key_from_its_key_file_not_the_config(home: Path) -> None:
    """A keyed server's key reaches Codex through the provider's auth command on the key file, never the file."""
    import tomllib

    from mlx_agent.plan import agent_settings as settings
    from mlx_agent.plan.wiring import agent_edits, file_edit

    env = {"HOME": str(home), "CODEX_HOME": str(home / "codex")}
    files = config_files("codex", "user", env, home)
    edits, warnings = agent_edits("codex", files, facts("sk-secret"), None, False)
    provider = dict(edits[0][1])
    auth = ("model_providers", "mlx_agent", "auth")
    assert provider[(*auth, "command")] == "grep" and provider[(*auth, "args")][-1] == "/keys/it's here"
    assert ("model_providers", "mlx_agent", "env_key") not in provider and warnings == []
    written = file_edit(files[0], edits[0][1])[1].decode()
    assert "sk-secret" not in written and "[model_providers.mlx_agent.auth]" in written
    table = tomllib.loads(written)["model_providers"]["mlx_agent"]
    assert table["auth"] == settings.codex_auth(facts("sk-secret"))
    [(_, keyless)], _ = agent_edits("codex", files[:1], facts(None), None, True)
    assert not any(k[:3] == auth or k[-1] == "env_key" for k, _ in keyless)


def test_a_server_restarted_after_the_preview_is_wired_server_mismatch(home: Path) -> None:
    """Confirm against another server process than the one previewed is wired_server_mismatch; nothing is written."""
    cf = claude_file(home)
    planned = wiring.preview(wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home))[0])
    restarted = {**SERVER, "identity": {"pid": 5151, "create_time": 1700000200.0}}
    with pytest.raises(commands.WiredServerMismatch) as caught:
        wiring.reviewed(
            lambda: wiring.plan_wire("claude", "user", restarted, [(cf, CLAUDE_EDITS)], wired_dir(home)),
            planned["preview_hash"],
        )
    assert caught.value.details["now"] == restarted["identity"] and cf.path.read_text() == CLAUDE_SETTINGS


def test_a_key_where_a_table_must_be_is_refused(home: Path) -> None:
    """A settings file whose ``env`` is not an object is agent_config_unparsable naming the key; nothing written."""
    cf = claude_file(home, '{\n  "env": "EDITOR=vim"\n}\n')
    with pytest.raises(commands.AgentConfigUnparsable) as caught:
        wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home))
    assert "env.ANTHROPIC_BASE_URL" in caught.value.message and cf.path.read_text() == '{\n  "env": "EDITOR=vim"\n}\n'


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("claude", '{"env": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ("claude", '{"a": ' * 65 + "1" + "}" * 65),
        ("codex", "a = " + "[" * 100_000 + "]" * 100_000),
    ],
)
def test_a_config_nested_too_deep_is_unparsable_not_a_recursion_error(home: Path, kind: str, text: str) -> None:
    """A settings file nested past MAX_DEPTH (100,000 deep, or 65) is agent_config_unparsable saying so."""
    cf = claude_file(home, text) if kind == "claude" else codex_file(home, text)
    with pytest.raises(commands.AgentConfigUnparsable) as caught:
        wiring.plan_wire(kind, "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home))
    assert caught.value.details["path"] == str(cf.path) and "nest" in caught.value.message
    assert cf.path.read_text() == text and not wired_dir(home).exists()


def test_a_config_over_the_size_bound_is_refused_unread(home: Path) -> None:
    """A 200 MB settings file is agent_config_unparsable naming its size and the bound, for wire, unwire and status."""
    cf = claude_file(home, CLAUDE_SETTINGS)
    record = wire(home, "claude", cf, CLAUDE_EDITS)
    with open(cf.path, "r+b") as fh:
        fh.truncate(200 * 1024 * 1024)  # sparse: nothing is written, and a read past the bound would be slow
    with pytest.raises(commands.AgentConfigUnparsable) as caught:
        wiring.plan_unwire(wired_dir(home), "claude", "user", [cf])
    assert caught.value.details["size"] == 200 * 1024 * 1024
    assert caught.value.details["limit_bytes"] == MAX_CONFIG_BYTES and str(MAX_CONFIG_BYTES) in caught.value.message
    assert file_drift(record["files"][0])["state"] == "unreadable"
    Path(record["files"][0]["backup"]).unlink()
    next(wired_dir(home).glob("*.json")).unlink()
    with pytest.raises(commands.AgentConfigUnparsable) as caught:
        wiring.plan_wire("claude", "user", SERVER, [(cf, CLAUDE_EDITS)], wired_dir(home))
    assert caught.value.details["size"] == 200 * 1024 * 1024


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to write another user's file")
@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_wire_and_unwire_as_root_keep_another_users_owner_and_mode(home: Path, agent: str) -> None:
    """Root wiring another user's file leaves it theirs with its mode, after the wire and after the unwire."""
    cf = claude_file(home) if agent == "claude" else codex_file(home)
    os.chown(cf.path, 65534, 65534)
    cf.path.chmod(0o640)
    wire(home, agent, cf, CLAUDE_EDITS if agent == "claude" else CODEX_EDITS)
    st = cf.path.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (65534, 65534, 0o640)
    unwire(home, agent, cf)
    st = cf.path.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (65534, 65534, 0o640)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to write into another user's directory")
def test_a_file_and_directory_the_wire_makes_as_root_belong_to_the_home_owner(home: Path) -> None:
    """Root wiring a HOME of another user makes .claude and settings.json theirs, not root's."""
    os.chown(home, 65534, 65534)
    cf = claude_file(home, None)
    wire(home, "claude", cf, CLAUDE_EDITS[:2])
    assert (cf.path.parent.stat().st_uid, cf.path.stat().st_uid, cf.path.stat().st_gid) == (65534, 65534, 65534)


def test_confirms_leave_no_lock_file_and_a_waiter_locks_the_file_at_the_path(home: Path) -> None:
    """Wire and unwire under their lock leave wired/locks empty; a waiter on a removed lock file locks the new one."""
    import threading

    cf = claude_file(home)
    locks = wired_dir(home) / "locks"
    with wiring.wiring_lock(wired_dir(home), "claude", "user", [cf]):
        wire(home, "claude", cf, CLAUDE_EDITS)
    with wiring.wiring_lock(wired_dir(home), "claude", "user", [cf]):
        unwire(home, "claude", cf)
    assert list(locks.iterdir()) == []

    lock = locks / "held.lock"
    busy = commands.LockTimeout("busy")
    release, held, outcome = threading.Event(), threading.Event(), []

    def second() -> None:
        with file_lock(lock, timeout=60, busy=busy, remove=True):
            held.set()
            release.wait(60)

    with file_lock(lock, timeout=0, busy=busy, remove=True):
        waiter = threading.Thread(target=second)
        waiter.start()
        while sum(os.path.realpath(f"/proc/self/fd/{fd}") == str(lock) for fd in os.listdir("/proc/self/fd")) < 2:
            pass  # until the waiter has opened the lock file this block holds (then removes)
    assert held.wait(60)
    try:
        with file_lock(lock, timeout=0, busy=busy):
            outcome.append("locked")  # a third command got a lock while the waiter holds it: two files, one lock
    except commands.LockTimeout:
        outcome.append("busy")
    release.set()
    waiter.join(60)
    assert outcome == ["busy"] and not lock.exists()


def test_a_stale_lock_file_is_not_a_wiring_and_goes_with_the_next_confirm(home: Path) -> None:
    """A lock file a killed command left is not listed by wire status; the next confirm of its wiring removes it."""
    cf = claude_file(home)
    stale = wired_dir(home) / "locks" / f"{record_stem('claude', 'user', [cf])}.lock"
    stale.parent.mkdir(parents=True, mode=0o700)
    stale.touch(mode=0o600)
    assert wiring.wiring_status(wired_dir(home), home / "serve") == []
    with wiring.wiring_lock(wired_dir(home), "claude", "user", [cf]):
        wire(home, "claude", cf, CLAUDE_EDITS)
    assert [w["agent"] for w in wiring.wiring_status(wired_dir(home), home / "serve")] == ["claude"]
    assert not stale.exists()
