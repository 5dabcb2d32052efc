"""`mlx-agent wire` edits the real agents' own config files so that the agents, run plainly, use a served model.

Claude Code and Codex CLI (the pinned ones) run in a loopback-only namespace with HOME (and CODEX_HOME) in a
temporary directory holding realistic existing configs. After `wire ... --confirm`, the agent is run with no
setting of ours in its environment or argv, finishes a tool round trip on the scripted model (exit 0), and
`unwire` then leaves every wired file byte-identical to before; `wire status` sees a hand edit as drift.

The Claude Code test and the Codex tests share one keyed server with tests/e2e/test_agent_run.py
(``keyed_notes_server``, tests/agent_servers.py): its model reads the two notes when offered Read and cats them
when offered exec_command; each test begins with no wiring in the server's home, reads the request lines written
since it began, and unwires what it wired. The opencode test stops its server: it has its own.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.plan.agent_settings import CHECKED, CLAUDE_AUTO_MODE_NOTE
from tests.agent_servers import NOTES_KEY, NotesServer, assert_own_reuse
from tests.agents_support import (
    AGENT_PACKAGES,
    Namespace,
    agent_binary,
    assert_cache_reuse,
    assert_no_model_trouble,
    clean_env,
    codex_exec,
    inside,
    scripted_agent_model,
    serve,
    session_turns,
)
from tests.conftest import Agent

pytestmark = pytest.mark.e2e

ANSWER = "Basil"
KEY = NOTES_KEY  # the shared server's (``keyed_notes_server``)
CLAUDE_SETTINGS = {
    "permissions": {"allow": ["Read"], "defaultMode": "default"},
    "env": {"EDITOR": "vim", "DISABLE_TELEMETRY": "1"},
    "includeCoAuthoredBy": False,
}
CODEX_CONFIG = """# Codex, set up by hand.
model = "o3"  # the hosted default, replaced by --default while wired
approval_policy = "never"

# Checkouts Codex trusts.
[projects."/srv/app"]
trust_level = "trusted"

[model_providers.azure]
name = "Azure"  # the work account
base_url = "https://example.openai.azure.com/openai"
env_key = "AZURE_OPENAI_API_KEY"
wire_api = "responses"
"""


def sha(path: Path) -> str:
    """Return a file's sha256."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wired(cli: Agent, *args: str) -> dict[str, Any]:
    """Preview `wire ARGS`, confirm it with the preview's hash, and return the confirm's data and warnings."""
    preview = cli.run("wire", *args)
    assert preview.rc == 0, preview.stdout + preview.stderr
    assert preview.data["requires_confirmation"] is True
    done = cli.run("wire", *args, "--confirm", "--preview-hash", preview.data["plan"]["preview_hash"])
    assert done.rc == 0, done.stdout + done.stderr
    return {**done.data, "warnings": [*preview.doc["warnings"], *done.doc["warnings"]]}


def unwired(cli: Agent, agent: str) -> dict[str, Any]:
    """Preview and confirm `unwire AGENT`; return the confirm's data."""
    preview = cli.run("unwire", agent)
    assert preview.rc == 0, preview.stdout + preview.stderr
    done = cli.run("unwire", agent, "--confirm", "--preview-hash", preview.data["plan"]["preview_hash"])
    assert done.rc == 0, done.stdout + done.stderr
    return dict(done.data)


def status_of(cli: Agent) -> dict[str, Any]:
    """Return the only wiring `wire status` lists."""
    result = cli.run("wire", "status")
    assert result.rc == 0, result.stdout + result.stderr
    [wiring] = result.data["wirings"]
    return dict(wiring)


def no_wiring(served: NotesServer) -> int:
    """Check the shared server's home holds no wiring (each test unwires its own); return the request lines so far."""
    assert served.server.cli.run("wire", "status").data["wirings"] == []
    return served.server.fresh()


def test_wired_claude_code_runs_plainly_and_unwire_restores_the_bytes(
    keyed_notes_server: NotesServer, tmp_path: Path
) -> None:
    """Plain `claude -p` (only HOME set) reads two files via its wired settings, cache reused; unwire undoes it."""
    server, work, notes = keyed_notes_server.server, keyed_notes_server.work, keyed_notes_server.notes
    namespace, port = server.namespace, server.port
    seen = no_wiring(keyed_notes_server)
    home = tmp_path / "claude-home"
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps(CLAUDE_SETTINGS, indent=2) + "\n")
    before = sha(settings)
    cli = inside(Agent(server.cli.home, {**server.cli.env, "HOME": str(home)}), namespace)

    shown = cli.run("wire", "claude", "--port", str(port), check_json=False)  # what a person reads
    assert shown.rc == 0 and f"+++ {settings}" in shown.stdout and "preview_hash: " in shown.stdout, shown.stdout
    assert '+    "ANTHROPIC_BASE_URL": ' in shown.stdout and "# the original is kept as " in shown.stdout
    assert f"warning: {CLAUDE_AUTO_MODE_NOTE}" in shown.stderr  # what auto mode loses, where the user reads
    done = wired(cli, "claude", "--port", str(port))
    assert done["warnings"] == [CLAUDE_AUTO_MODE_NOTE] * 2  # the preview's and the confirm's
    written = json.loads(settings.read_text())
    assert list(written) == [*CLAUDE_SETTINGS, "apiKeyHelper"]  # the user's keys first, in their order
    assert written["env"]["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{port}" and written["env"]["EDITOR"] == "vim"
    assert KEY not in settings.read_text()  # the key is read from the server's key file by apiKeyHelper
    assert done["files"][0]["sha256_before"] == before

    prompt = "Read a.txt and b.txt, then tell me the word."
    ran = namespace.run(
        [str(agent_binary("claude")), "-p", prompt, "--output-format", "json"], clean_env(home), work, timeout=600
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads(ran.stdout)
    assert result["is_error"] is False and result["result"] == ANSWER, result
    assert result["num_turns"] == len(notes) + 1, result  # the answer comes only after both Reads went back
    turns = session_turns(cli, port, prompt, len(notes) + 1, seen)  # also: no billing block reached the template
    assert {t["model"] for t in turns} == {"local-coder"}
    assert_cache_reuse(turns)
    assert_own_reuse(turns)  # the shared server's cache held earlier tests' prompts

    assert status_of(cli)["server"]["state"] == "up" and not status_of(cli)["drifted"]
    wired_text = settings.read_text()
    edited = json.loads(wired_text)
    edited["env"]["ANTHROPIC_MODEL"] = "something-else"
    settings.write_text(json.dumps(edited, indent=2) + "\n")
    drifted = status_of(cli)
    listed = cli.run("wire", "status", check_json=False).stdout
    assert f"{settings}: edited" in listed and "env.ANTHROPIC_MODEL: changed" in listed, listed
    assert drifted["drifted"] is True
    [entry] = drifted["files"]
    assert entry["state"] == "edited" and [d["key"] for d in entry["drift"]] == [["env", "ANTHROPIC_MODEL"]]
    settings.write_text(wired_text)  # the hand edit undone: the file is again what the wire wrote

    undone = unwired(cli, "claude")
    assert [f["action"] for f in undone["files"]] == ["restore"]
    assert sha(settings) == before
    assert cli.run("wire", "status").data["wirings"] == []


@pytest.mark.parametrize("default", [True, False], ids=["default", "profile"])
def test_wired_codex_runs_plainly_and_unwire_restores_the_bytes(
    keyed_notes_server: NotesServer, tmp_path: Path, default: bool
) -> None:
    """Plain `codex exec` (HOME, CODEX_HOME; `-p mlx-agent`) runs cat twice on a keyed server; unwire undoes it."""
    server, work, notes = keyed_notes_server.server, keyed_notes_server.work, keyed_notes_server.notes
    namespace, port = server.namespace, server.port
    seen = no_wiring(keyed_notes_server)
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    config = codex_home / "config.toml"
    config.write_text(CODEX_CONFIG)
    before = sha(config)
    env = {"CODEX_HOME": str(codex_home)}
    cli = inside(Agent(server.cli.home, {**server.cli.env, **env, "HOME": str(tmp_path / "home-dir")}), namespace)

    done = wired(cli, "codex", "--port", str(port), *(["--default"] if default else []))
    assert done["warnings"] == []  # nothing for the user to set: Codex reads the key file itself
    text = config.read_text()
    assert KEY not in text and "[model_providers.mlx_agent.auth]" in text  # a command reading the key file
    assert f'"{server.root / "keys"}"]' in text and "env_key" not in text.split("[model_providers.mlx_agent]")[1]
    assert "# Checkouts Codex trusts." in text and '[model_providers.azure]\nname = "Azure"  # the work account' in text
    assert ('model_provider = "mlx_agent"' in text.split("\n[", 1)[0]) is default  # top-level only as the default
    profile = codex_home / "mlx-agent.config.toml"
    assert profile.exists() is not default

    prompt = "Run cat on a.txt and b.txt, then tell me the word."
    argv = codex_exec(prompt)
    if not default:
        argv[2:2] = ["-p", "mlx-agent"]
    plain = clean_env(tmp_path, **env)  # no key in it: Codex runs the provider's auth command
    assert KEY not in json.dumps(plain) and "MLX_AGENT_API_KEY" not in plain
    ran = namespace.run(argv, plain, work, 600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.strip().splitlines()[-1] == ANSWER, ran.stdout
    assert_no_model_trouble(ran.stderr)  # the auth provider asks for the catalogue, and decodes the answer
    turns = session_turns(cli, port, prompt, len(notes) + 1, seen)  # every request line 200: the key was accepted
    assert {t["model"] for t in turns} == {"local-coder"}
    assert_cache_reuse(turns)
    assert_own_reuse(turns)

    if not default:
        undone = unwired(cli, "codex")
        assert [f["action"] for f in undone["files"]] == ["restore", "delete"]
        assert sha(config) == before and not profile.exists()
        return
    wired_text = config.read_text()
    config.write_text(wired_text.replace("model_context_window = ", "model_context_window = 1"))
    [entry] = status_of(cli)["files"]
    assert entry["state"] == "edited" and [d["key"] for d in entry["drift"]] == [["model_context_window"]]
    config.write_text(wired_text)

    undone = unwired(cli, "codex")
    assert [f["action"] for f in undone["files"]] == ["restore"]
    assert sha(config) == before


OPENCODE_SETTINGS = {
    "$schema": "https://opencode.ai/config.json",
    "theme": "opencode",
    "autoupdate": False,
    "share": "disabled",
}


def test_wired_opencode_config_passes_opencodes_own_validation(
    agent: Agent, tmp_path: Path, namespace: Namespace
) -> None:
    """The written opencode.json passes opencode's own validation and names the served models; it claims its port."""
    assert AGENT_PACKAGES["opencode"].endswith("@" + CHECKED["opencode"])  # the version the table was checked on
    model = scripted_agent_model(tmp_path / "model", "Read", {"file_path": "/dev/null"}, ANSWER)
    port = serve(inside(agent, namespace), model, [], KEY, tmp_path)
    home = tmp_path / "oc-home"
    config = home / ".config" / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True)
    config.write_text(json.dumps(OPENCODE_SETTINGS, indent=2) + "\n")
    before = sha(config)
    cli = inside(Agent(agent.home, {**agent.env, "HOME": str(home)}), namespace)

    wired(cli, "opencode", "--port", str(port), "--default")
    written = json.loads(config.read_text())
    assert KEY not in config.read_text() and written["provider"]["mlx-agent"]["options"]["apiKey"].startswith("{file:")
    shown = namespace.run([str(agent_binary("opencode")), "debug", "config"], clean_env(home), tmp_path, timeout=120)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    merged = json.loads(shown.stdout)
    provider = merged["provider"]["mlx-agent"]
    assert provider["options"]["baseURL"] == f"http://127.0.0.1:{port}/v1"
    assert list(provider["models"]) == ["local-coder"] and merged["model"] == "mlx-agent/local-coder"

    assert cli.run("serve", "stop", "--port", str(port)).rc == 0
    assert status_of(cli)["server"]["state"] == "down"
    other = cli.run("serve", "start", "--path", str(model), "--port", str(port), "--served-model-name", "other")
    assert other.code == "port_claimed", other.stdout  # the wiring expects local-coder on this port
    assert other.doc["error"]["details"]["claims"][0]["model"] == "local-coder"

    undone = unwired(cli, "opencode")
    assert [f["action"] for f in undone["files"]] == ["restore"]
    assert sha(config) == before
