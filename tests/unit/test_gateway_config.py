"""Gateway config: the schema and the loader agree, and unsafe or malformed configs are refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.gateway.config import ConfigError, load_config, parse_config, read_private_lines, read_secret_file
from tests.conftest import assert_valid
from tests.gateway_support import gateway_config


def example(tmp_path: Path) -> dict[str, Any]:
    """Return a valid config document."""
    argv = ["/usr/bin/python3", "-m", "mlx_agent.runtime", "mlx_lm", "--port", "{port}"]
    return gateway_config(tmp_path, 8080, argv, model_path=tmp_path / "model")


def test_example_config_is_schema_valid_and_loads(tmp_path: Path) -> None:
    """The config the tests write validates against the shipped schema and loads with its values."""
    doc = example(tmp_path)
    assert_valid("gateway_config", doc)
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps(doc))
    config = load_config(path)
    assert config.port == 8080 and config.max_tokens == 16
    assert config.model_names == {"org/tiny", "default_model", str(tmp_path / "model")}
    assert config.worker.argv_for(4321)[-1] == "4321"
    assert config.worker.env["HF_HUB_OFFLINE"] == "1" and config.worker.env["TRANSFORMERS_OFFLINE"] == "1"


def test_minimal_config_takes_defaults(tmp_path: Path) -> None:
    """Optional fields default: no policy reserve, no keys, no file checks, a 16 MiB body cap."""
    doc = example(tmp_path)
    for key in ("weight_bytes", "policy", "api_key_path", "file_checks", "max_body_bytes"):
        doc.pop(key)
    assert_valid("gateway_config", doc)
    config = parse_config(doc)
    assert config.policy.min_headroom_gb is None and not config.policy.idle_unload
    assert config.api_key_path is None and config.file_checks == () and config.max_body_bytes == 16 * 1024 * 1024


@pytest.mark.parametrize(("change", "words"), [
    ({"host": "0.0.0.0"}, "loopback"),
    ({"port": 0}, "port"),
    ({"model_path": "relative/model"}, "model_path"),
    ({"format_version": "2.0"}, "format_version"),
    ({"surprise": 1}, "unknown"),
    ({"max_tokens": True}, "max_tokens"),
    ({"policy": {"idle_timeout_s": -1, "keep_loaded": False, "min_headroom_gb": None}}, "idle_timeout_s"),
    ({"file_checks": [{"path": "/a", "sha256": "xyz", "size": 1}]}, "sha256"),
])
def test_bad_configs_are_refused_by_name(tmp_path: Path, change: dict[str, Any], words: str) -> None:
    """Each unsafe or malformed field is refused with a message naming it."""
    doc = {**example(tmp_path), **change}
    with pytest.raises(ConfigError, match=words):
        parse_config(doc)


def test_worker_argv_needs_the_port_placeholder(tmp_path: Path) -> None:
    """A worker argv without {port} is refused: the gateway must choose the private port."""
    doc = example(tmp_path)
    doc["worker"]["argv"] = ["/usr/bin/python3", "-m", "x", "--port", "8081"]
    with pytest.raises(ConfigError, match="port"):
        parse_config(doc)


def test_secret_files_must_be_private(tmp_path: Path) -> None:
    """A token file others can read is refused; a private one yields its single token."""
    token = tmp_path / "token"
    token.write_text("secret\n")
    os.chmod(token, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
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
    with pytest.raises(ConfigError, match="empty"):
        read_private_lines(keys, "API key file")


def test_recipe_readiness_checks_are_accepted(tmp_path: Path) -> None:
    """A recipe's readiness (POST body, nonnull fields, per-probe timeout) passes into the worker spec."""
    doc = example(tmp_path)
    doc["worker"]["readiness"] = {"path": "/health", "status": 200, "json": {"status": "healthy"},
                                  "nonnull": ["loaded_model"], "timeout_s": 5, "loaded_before_listen": False}
    assert_valid("gateway_config", doc)
    readiness = parse_config(doc).worker.readiness
    assert (readiness["nonnull"], readiness["timeout_s"], readiness["post"]) == (["loaded_model"], 5.0, None)
