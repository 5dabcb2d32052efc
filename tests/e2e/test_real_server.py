"""End to end against a real mlx_lm.server (CPU backend) on a tiny locally built model."""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import Agent, assert_valid, free_port, processes_mentioning
from tests.fixtures.tiny_model import build_hf_cache_repo

pytestmark = pytest.mark.e2e


def test_preview_confirm_chat_status_stop(agent: Agent, model_copy: Path) -> None:
    """The whole lifecycle: a real server answers the official openai client, then stops cleanly."""
    port = free_port()
    receipt = agent.launch("--path", str(model_copy), "--port", str(port), "--max-tokens", "16")
    log = Path(receipt["plan"]["models"][0]["worker"]["log_path"]).read_text()
    assert log.index("mlx-agent: model loaded") < log.index("listening on unix socket"), "loaded before listening"
    assert "Starting httpd" not in log  # mlx_lm's own HTTP port (CORS *, no auth) is never opened

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local")
    reply = client.chat.completions.create(
        model="default_model", max_tokens=8, messages=[{"role": "user", "content": "Say hello"}]
    )
    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.completion_tokens <= 8

    server = agent.run("serve", "status").data["servers"][0]
    assert (server["state"], server["health"], server["port"]) == ("running", "ok", port)
    stop = agent.run("serve", "stop", "--port", str(port))
    assert (stop.rc, stop.data["result"]) == (0, "stopped")
    assert agent.run("serve", "status").data["servers"] == []
    assert processes_mentioning(str(model_copy)) == []


def test_repo_from_the_hf_cache(agent: Agent, tiny_model: Path) -> None:
    """--repo serves a snapshot from the local HF cache, bound by revision and blob ids."""
    snapshot = build_hf_cache_repo(Path(agent.env["HF_HOME"]), "mlx-community/tiny-llama", tiny_model)
    port = free_port()
    receipt = agent.launch("--repo", "mlx-community/tiny-llama", "--port", str(port))
    plan = receipt["plan"]
    assert isinstance(plan, dict)
    assert plan["models"][0]["source"]["revision"] == snapshot.name
    assert receipt["models"][0]["repo"] == "mlx-community/tiny-llama"
    assert plan["models"][0]["served_model_name"] == "mlx-community/tiny-llama"  # the served name is the repo id
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local")
    reply = client.chat.completions.create(
        model="default_model", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].finish_reason in {"length", "stop"}
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def test_the_context_window_bounds_every_request(agent: Agent, tiny_model: Path) -> None:
    """A prompt the context cannot hold is 400 context_length_exceeded (not retried); a long ask is cut to fit."""
    port = free_port()
    agent.launch("--path", str(tiny_model), "--port", str(port), "--served-model-name", "tiny", "--alias", "gpt-*")
    url = f"http://127.0.0.1:{port}"

    def post(content: str, max_tokens: int) -> tuple[int, Any, dict[str, str]]:
        body = {"model": "tiny", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
        request = urllib.request.Request(
            f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                return answer.status, json.loads(answer.read()), dict(answer.headers)
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read()), dict(error.headers)

    status, doc, headers = post("a b " * 2000, 16)
    assert status == 400 and doc["error"]["code"] == "context_length_exceeded", doc
    assert headers.get("x-should-retry") == "false"
    status, doc, _ = post("a b " * 900, 2048)
    assert status == 200, doc
    usage = doc["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= 2048 < usage["prompt_tokens"] + 2048
    assert doc["choices"][0]["finish_reason"] == "length"

    for method in ("GET", "HEAD"):
        with urllib.request.urlopen(urllib.request.Request(f"{url}/", method=method)) as answer:
            assert answer.status == 200
    listing = urllib.request.Request(f"{url}/v1/models", headers={"anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(listing) as answer:
        models = json.loads(answer.read())
    assert [(m["id"], m["type"], m["display_name"]) for m in models["data"]] == [("tiny", "model", "tiny")]
    assert models["data"][0]["aliases"] == ["gpt-*"]  # a glob names many models: listed under its model, not as an id
    assert models["has_more"] is False and models["first_id"] == "tiny"
    with urllib.request.urlopen(f"{url}/v1/models/gpt-4o") as answer:
        assert json.loads(answer.read())["alias_of"] == "tiny"
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0


def test_model_that_cannot_load_is_launch_failed(agent: Agent, model_copy: Path) -> None:
    """A model mlx_lm cannot load fails confirm with launch_failed and mlx_lm's own words in the tail."""
    config = json.loads((model_copy / "config.json").read_text())
    # A third layer the weights do not have: the plan is fine, loading the weights is not.
    (model_copy / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    args = ["--path", str(model_copy), "--port", str(free_port())]
    preview_hash = agent.preview_hash(*args)
    result = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview_hash)
    assert (result.rc, result.code) == (1, "launch_failed")
    assert "layers.2" in "\n".join(result.doc["error"]["details"]["log_tail"])
    assert not list(agent.serve_dir.glob("*.json"))
    assert processes_mentioning(str(model_copy)) == []


def test_ten_concurrent_confirms_start_one_server(agent: Agent, tiny_model: Path, tmp_path: Path) -> None:
    """Of 10 simultaneous confirms for one port, one starts a server, nine get port_in_use, none orphans."""
    model = tmp_path / "concurrent-model"
    shutil.copytree(tiny_model, model)
    port = free_port()
    args = ["--path", str(model), "--port", str(port)]
    preview_hash = agent.preview_hash(*args)
    clis = [agent.popen("serve", "start", *args, "--confirm", "--preview-hash", preview_hash) for _ in range(10)]
    outcomes = []
    for cli in clis:
        stdout, _ = cli.communicate(timeout=180)
        doc = json.loads(stdout)
        assert_valid("envelope", doc)
        outcomes.append((cli.returncode, doc.get("error", {}).get("code")))
    assert sorted(outcomes, key=str) == sorted([(0, None)] + [(1, "port_in_use")] * 9, key=str)
    servers = agent.run("serve", "status").data["servers"]
    assert [(s["port"], s["state"]) for s in servers] == [(port, "running")]
    assert len(processes_mentioning(str(model))) == 1
    assert agent.run("serve", "stop", "--port", str(port)).rc == 0
    assert processes_mentioning(str(model)) == []
