"""`mlx-agent models` through the real CLI: its envelope and schema, a person's table, and a live server's port."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Agent, assert_valid, free_port
from tests.fixtures.tiny_model import build_hf_cache_repo


def test_models_lists_the_cache_and_dirs_and_the_port_serving_one(agent: Agent, tiny_model: Path) -> None:
    """The cache's repos and a --dir model are listed, schema-valid, and a running server's port is on its row."""
    hf_home = Path(agent.env["HF_HOME"])
    build_hf_cache_repo(hf_home, "org/tiny", tiny_model)
    build_hf_cache_repo(hf_home, "org/partial", tiny_model, complete=False)
    port = free_port()
    agent.launch("--repo", "org/tiny", "--port", str(port))
    result = agent.run("models", "--dir", str(tiny_model))
    assert result.rc == 0, result.stdout + result.stderr
    assert_valid("models_listing", result.data)
    rows = {row["name"]: row for row in result.data["models"]}
    assert sorted(rows) == ["org/partial", "org/tiny", tiny_model.name]
    assert rows["org/tiny"]["served"] == [{"port": port, "served_model_name": "org/tiny"}]
    assert rows[tiny_model.name]["served"] == []  # the same weights, but not the directory the server reads
    assert (rows["org/partial"]["complete"], rows["org/partial"]["missing"]) == (False, ["model.safetensors"])
    agent.run("serve", "stop", "--port", str(port))
    after = agent.run("models")
    assert {row["name"]: row["served"] for row in after.data["models"]}["org/tiny"] == []


def test_models_prints_a_table_and_each_problem_for_a_person(agent: Agent, tiny_model: Path) -> None:
    """Without --json a person gets one table row per model and the incomplete one's reason on stderr."""
    build_hf_cache_repo(Path(agent.env["HF_HOME"]), "org/partial", tiny_model, complete=False)
    result = agent.run("models", "--dir", str(tiny_model), check_json=False)
    assert result.rc == 0
    assert "org/partial" in result.stdout and tiny_model.name in result.stdout
    assert "org/partial: lacks model.safetensors" in result.stderr and "model_not_local" in result.stderr


def test_models_with_nothing_found_says_where_it_looked(agent: Agent) -> None:
    """An empty cache gives an empty list under --json and a sentence naming the cache for a person."""
    assert agent.run("models").data["models"] == []
    result = agent.run("models", check_json=False)
    assert result.rc == 0 and "No models found" in result.stdout


def test_a_missing_dir_is_a_usage_error(agent: Agent, tmp_path: Path) -> None:
    """A --dir that does not exist exits 2 with invalid_arguments and its remedy."""
    result = agent.run("models", "--dir", str(tmp_path / "typo"))
    assert (result.rc, result.code) == (2, "invalid_arguments") and result.doc["error"]["remediation"]
