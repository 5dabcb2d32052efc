"""Front config: the generated schema and the loader agree, and unsafe or malformed configs are refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import FrontConfigInvalid
from mlx_agent.gateway.door.config import load_config, matches, parse_config, read_private_lines, read_secret_file
from tests.conftest import assert_valid
from tests.gateway_support import gateway_config

pytestmark = pytest.mark.fast


def example(tmp_path: Path) -> dict[str, Any]:
    """Return a valid config document (one TCP worker)."""
    argv = ["/usr/bin/python3", "-m", "mlx_agent.runtime", "mlx_lm", "--port", "{port}"]
    return gateway_config(tmp_path, 8080, argv, model_path=tmp_path / "model")


def test_example_config_is_schema_valid_and_loads(tmp_path: Path) -> None:
    """The config the tests write validates against the shipped schema and loads with its values."""
    doc = example(tmp_path)
    assert_valid("front_config", doc)
    path = tmp_path / "front.json"
    path.write_text(json.dumps(doc))
    config = load_config(path)
    model = config["models"][0]
    assert config["port"] == 8080 and config["mode"] == "jit" and model["max_tokens"] == 16
    assert model["served_model_name"] == "org/tiny" and model["hidden_names"] == [
        "default_model",
        str(tmp_path / "model"),
    ]
    assert model["worker"]["env"]["HF_HUB_OFFLINE"] == "1"


def change_model(doc: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """Return ``doc`` with its first model's fields changed."""
    return {**doc, "models": [{**doc["models"][0], **fields}]}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"host": "0.0.0.0"}, "host"),
        ({"port": 0}, "port"),
        ({"policy_path": "relative/policy.json"}, "policy_path"),
        ({"format_version": "1.0"}, "format_version"),
        ({"surprise": 1}, "surprise"),
        ({"mode": "lazy"}, "mode"),
        ({"models": []}, "models"),
    ],
)
def test_bad_configs_are_refused_by_name(tmp_path: Path, change: dict[str, Any], words: str) -> None:
    """Each unsafe or malformed front field is refused with a message naming it."""
    with pytest.raises(FrontConfigInvalid, match=words):
        parse_config({**example(tmp_path), **change})


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"max_tokens": True}, "max_tokens"),
        ({"policy": {"idle_timeout": -1, "keep_loaded": False, "preload": False}}, "idle_timeout"),
        ({"file_checks": [{"path": "/a", "sha256": "xyz", "size": 1}]}, "sha256"),
        ({"served_model_name": ""}, "served_model_name"),
    ],
)
def test_bad_model_fields_are_refused_by_name(tmp_path: Path, change: dict[str, Any], words: str) -> None:
    """Each malformed model field is refused with a message naming it."""
    with pytest.raises(FrontConfigInvalid, match=words):
        parse_config(change_model(example(tmp_path), **change))


def test_worker_argv_needs_its_transport_placeholder(tmp_path: Path) -> None:
    """A TCP worker's argv needs {port} and a Unix one's {socket}: the front chooses the private address."""
    doc = example(tmp_path)
    worker = {**doc["models"][0]["worker"], "argv": ["/usr/bin/python3", "-m", "x", "--port", "8081"]}
    with pytest.raises(FrontConfigInvalid, match="port"):
        parse_config(change_model(doc, worker=worker))
    with pytest.raises(FrontConfigInvalid, match="socket"):
        parse_config(change_model(doc, worker={**worker, "transport": "unix"}))


def test_a_tcp_worker_may_take_its_port_from_its_environment(tmp_path: Path) -> None:
    """A TCP worker with a port variable (a native entry's) needs no {port} in argv; a Unix one still needs {socket}."""
    doc = example(tmp_path)
    worker = {**doc["models"][0]["worker"], "argv": ["/usr/bin/python3", "/x/native_entry.py", "/x/server"]}
    config = parse_config(change_model(doc, worker={**worker, "port_env": "MLX_AGENT_WORKER_PORT"}))
    assert config["models"][0]["worker"].get("port_env") == "MLX_AGENT_WORKER_PORT"
    with pytest.raises(FrontConfigInvalid, match="socket"):
        parse_config(change_model(doc, worker={**worker, "port_env": "P", "transport": "unix"}))


def test_two_models_may_not_share_a_name(tmp_path: Path) -> None:
    """An alias that is another model's name is refused at load, naming both models."""
    doc = example(tmp_path)
    second = {**doc["models"][0], "served_model_name": "org/small", "alias": ["org/tiny"]}
    with pytest.raises(FrontConfigInvalid, match="org/tiny"):
        parse_config({**doc, "models": [doc["models"][0], second]})


def test_aliases_are_globs() -> None:
    """An alias such as claude-* matches every name it globs, and only those."""
    assert matches("claude-sonnet-4-5", ["claude-*"]) and not matches("gpt-4o", ["claude-*"])
    assert matches("gpt-4o", ["gpt-4o"]) and not matches("gpt-4o-mini", ["gpt-4o"])


def test_secret_files_must_be_private(tmp_path: Path) -> None:
    """A token file others can read is refused; a private one yields its single token."""
    token = tmp_path / "token"
    token.write_text("secret\n")
    os.chmod(token, 0o644)
    with pytest.raises(FrontConfigInvalid, match="chmod 600"):
        read_secret_file(token, "control token file")
    os.chmod(token, 0o600)
    assert read_secret_file(token, "control token file") == "secret"


def test_api_key_file_ignores_blanks_and_comments(tmp_path: Path) -> None:
    """API keys are the non-blank, non-comment lines; an empty file is refused."""
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nk1\n\n  k2  \n")
    os.chmod(keys, 0o600)
    assert read_private_lines(keys, "API key file") == ["k1", "k2"]
    keys.write_text("# nothing\n")
    with pytest.raises(FrontConfigInvalid, match="empty"):
        read_private_lines(keys, "API key file")


def test_recipe_readiness_checks_are_accepted(tmp_path: Path) -> None:
    """A recipe's readiness (POST body, nonnull fields, per-probe timeout) passes into the worker spec."""
    doc = example(tmp_path)
    readiness = {
        "path": "/health",
        "status": 200,
        "json": {"status": "healthy"},
        "nonnull": ["loaded_model"],
        "timeout_s": 5,
        "loaded_before_listen": False,
    }
    doc = change_model(doc, worker={**doc["models"][0]["worker"], "readiness": readiness})
    assert_valid("front_config", doc)
    loaded = parse_config(doc)["models"][0]["worker"]["readiness"]
    assert (loaded.get("nonnull"), loaded.get("timeout_s"), loaded.get("post")) == (["loaded_model"], 5.0, None)
