"""`mlx-agent mcp` through the official SDK's stdio client: the tools are the CLI's commands, envelope for envelope.

One session reviews a plan for the tiny model, launches it by its hash, reads its status and logs, wires Claude
Code to it in a temporary HOME, unloads it and stops it, all as tool calls, while the server's stdout (the MCP
stream) is copied aside and checked to hold nothing but JSON-RPC messages.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

from mlx_agent.cli.app import cli
from mlx_agent.cli.mcp_tools import BY_NAME, TOOLS, input_schema
from tests.conftest import Agent, assert_valid, free_port
from tests.e2e.mcp_support import mcp_tools
from tests.hub_standin import Hub, model_files, serve

pytestmark = pytest.mark.e2e

STALE = "0" * 64


def _serve_args(model: Path, port: int) -> dict[str, Any]:
    return {"path": str(model), "port": port, "served_model_name": "tiny", "max_tokens": 4}


def _env(agent: Agent, home: Path) -> dict[str, str]:
    return {**agent.env, "HOME": str(home)}


def test_an_agent_reviews_launches_inspects_wires_and_stops_a_server(
    agent: Agent, tiny_model: Path, tmp_path: Path
) -> None:
    """serve_preview, serve_confirm by its hash, status, logs, wire, unload and stop, each the CLI's envelope."""
    port = free_port()
    args = _serve_args(tiny_model, port)
    home = tmp_path / "user-home"
    home.mkdir()
    wire_log = tmp_path / "mcp-stdout.jsonl"
    cli_args = ["--path", str(tiny_model), "--port", str(port), "--served-model-name", "tiny", "--max-tokens", "4"]
    cli_preview = agent.run("serve", "start", *cli_args)
    assert cli_preview.rc == 0, cli_preview.stderr
    cli_stale = agent.run("serve", "start", *cli_args, "--confirm", "--preview-hash", STALE)
    assert cli_stale.rc == 1, cli_stale.stderr

    async def session() -> None:
        async with mcp_tools(_env(agent, home), agent.home, wire_log) as tools:
            listed = await tools.call("models", dir=[str(tiny_model)])
            assert listed.doc["operation"] == "models" and not listed.is_error
            assert any(row["path"] == str(tiny_model) for row in listed.data["models"]), listed.data

            preview = await tools.call("serve_preview", **args)
            assert preview.doc == cli_preview.doc  # the same envelope `serve start --json` prints
            assert_valid("serve_plan", preview.data["plan"])
            plan_hash = preview.data["plan"]["preview_hash"]

            stale = await tools.call("serve_confirm", **args, preview_hash=STALE)
            assert stale.is_error and stale.doc == cli_stale.doc  # preview_stale, as the CLI refuses it
            assert stale.code == "preview_stale", stale.doc
            bare = await tools.call("serve_confirm", **args)
            assert bare.is_error and bare.code == "preview_hash_required", bare.doc

            launched = await tools.call("serve_confirm", **args, preview_hash=plan_hash)
            assert not launched.is_error, launched.doc
            receipt = launched.data["receipt"]
            assert_valid("serve_receipt", receipt)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=30) as reply:
                assert [m["id"] for m in json.load(reply)["data"]] == ["tiny"]

            status = await tools.call("status", port=port)
            [server] = status.data["servers"]
            assert server["port"] == port and server["state"] == "running", server

            logs = await tools.call("logs", port=port, lines=5)
            assert not logs.is_error and {log["source"] for log in logs.data["logs"]} >= {"front"}, logs.doc

            wired = await tools.call("wire_preview", agent="claude", port=port)
            assert not wired.is_error, wired.doc
            written = await tools.call(
                "wire_confirm", agent="claude", port=port, preview_hash=wired.data["plan"]["preview_hash"]
            )
            assert not written.is_error, written.doc
            settings = json.loads((home / ".claude" / "settings.json").read_text())
            assert settings["env"]["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{port}", settings

            unloaded = await tools.call("unload", port=port, expected_pid=receipt["pid"])
            assert not unloaded.is_error, unloaded.doc
            stopped = await tools.call("stop", port=port)
            assert not stopped.is_error and stopped.doc["operation"] == "serve.stop", stopped.doc
            gone = await tools.call("status", port=port)
            assert gone.data["servers"] == [], gone.doc

    anyio.run(session)
    lines = wire_log.read_text().splitlines()
    assert lines and all(json.loads(line)["jsonrpc"] == "2.0" for line in lines)  # nothing else on the stream


def test_bad_calls_come_back_as_error_envelopes(agent: Agent, tmp_path: Path) -> None:
    """An unknown tool, an unknown or ill-typed argument, an out-of-range port: each an invalid_arguments envelope."""

    async def session() -> None:
        async with mcp_tools(_env(agent, tmp_path), agent.home) as tools:
            listed = await tools.session.list_tools()
            assert [t.name for t in listed.tools] == [t.name for t in TOOLS]
            looking = {t.name for t in listed.tools if t.annotations is not None and t.annotations.read_only_hint}
            assert looking == {"models", "serve_preview", "status", "logs", "wire_preview", "pull_preview"}
            confirm = next(t for t in listed.tools if t.name == "serve_confirm")
            assert confirm.input_schema == input_schema(BY_NAME["serve_confirm"], cli)
            nothing = await tools.call("launch_everything")
            unknown = await tools.call("stop", port=8080, force=True)
            typed = await tools.call("stop", port="8080")
            usage = await tools.call("stop", port=0)  # refused by the command itself, as on a terminal
            for answer in (nothing, unknown, typed, usage):
                assert answer.is_error and answer.code == "invalid_arguments", answer.doc
            assert unknown.doc["operation"] == "serve.stop" and unknown.doc["error"]["details"]["unknown"] == ["force"]
            missing = await tools.call("stop", port=free_port())
            assert missing.is_error and missing.code == "receipt_not_found", missing.doc

    anyio.run(session)


def test_an_agent_previews_then_pulls_a_model_from_the_hub(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """pull_preview, a stale pull_confirm, then pull_confirm by its hash: the CLI's envelopes, the files fetched."""
    hub = Hub()
    with serve(hub):
        commit = hub.publish("org/tiny", model_files(tiny_model))
        env = {**_env(agent, tmp_path), "HF_ENDPOINT": hub.url}
        env.pop("HF_HUB_OFFLINE", None)
        cli_preview = Agent(agent.home, env).run("pull", "org/tiny")
        assert cli_preview.rc == 0, cli_preview.stderr

        async def session() -> None:
            async with mcp_tools(env, agent.home) as tools:
                preview = await tools.call("pull_preview", repo="org/tiny")
                # The same envelope `pull --json` prints, the disk's free bytes aside (they move between the two).
                assert preview.data["plan"] == cli_preview.data["plan"], (preview.data, cli_preview.data)
                assert {**preview.doc, "data": None} == {**cli_preview.doc, "data": None}
                assert_valid("pull_preview", preview.data)
                assert preview.data["plan"]["commit"] == commit
                stale = await tools.call("pull_confirm", repo="org/tiny", preview_hash=STALE)
                assert stale.is_error and stale.code == "preview_stale", stale.doc
                pulled = await tools.call(
                    "pull_confirm", repo="org/tiny", preview_hash=preview.data["plan"]["preview_hash"]
                )
                assert not pulled.is_error and pulled.doc["operation"] == "pull", pulled.doc
                assert_valid("pull_result", pulled.data)  # the envelope alone: the progress lines are left out
                snapshot = Path(pulled.data["snapshot"])
                assert sorted(p.name for p in snapshot.iterdir()) == sorted(model_files(tiny_model))

        anyio.run(session)
