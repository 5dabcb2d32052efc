"""Canonical JSON, plan hashes and plan diffs."""

from __future__ import annotations

import pytest

from mlx_agent.canonical import canonical_json, plan_diff, plan_hash, with_hash

pytestmark = pytest.mark.fast


def test_canonical_json_sorts_keys_and_drops_spaces() -> None:
    """Key order and whitespace never change the bytes that are hashed."""
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": "é"}]}) == '{"a":[1,{"c":"é","d":2}],"b":1}'


def test_hash_ignores_its_own_field_and_key_order() -> None:
    """A plan hashes the same with or without its preview_hash and in any key order."""
    plan = {"port": 8080, "argv": ["a", "b"]}
    assert plan_hash(plan) == plan_hash({"argv": ["a", "b"], "port": 8080, "preview_hash": "x"})
    assert with_hash(plan)["preview_hash"] == plan_hash(plan)


def test_hash_changes_with_any_value() -> None:
    """Any changed value gives a different hash."""
    assert plan_hash({"port": 8080}) != plan_hash({"port": 8081})


def test_diff_lists_each_changed_leaf_old_to_new() -> None:
    """A diff names each changed leaf field with its old and new value."""
    old = {"port": 1, "env": {"A": "1"}, "argv": ["x"], "preview_hash": "h1"}
    new = {"port": 2, "env": {"A": "1", "B": "2"}, "argv": ["x", "y"], "preview_hash": "h2"}
    assert plan_diff(old, new) == [
        {"field": "argv", "old": ["x"], "new": ["x", "y"]},
        {"field": "env.B", "old": "<absent>", "new": "2"},
        {"field": "port", "old": 1, "new": 2},
    ]


def test_diff_of_named_files_names_the_file() -> None:
    """Changed file records read as one change per file field, addressed by the file's name."""
    old = {"source": {"files": [{"name": "a.json", "sha256": "1"}, {"name": "w.safetensors", "size": 3}]}}
    new = {"source": {"files": [{"name": "a.json", "sha256": "2"}, {"name": "w.safetensors", "size": 3}]}}
    assert plan_diff(old, new) == [{"field": "source.files[a.json].sha256", "old": "1", "new": "2"}]


def test_diff_of_served_models_names_the_model() -> None:
    """A fleet's models are addressed by their served_model_name, and a list of unnamed records is one value."""
    old = {"models": [{"served_model_name": "coder", "max_tokens": 64}, {"served_model_name": "small", "alias": []}]}
    new = {"models": [{"served_model_name": "coder", "max_tokens": 128}, {"served_model_name": "small", "alias": []}]}
    assert plan_diff(old, new) == [{"field": "models[coder].max_tokens", "old": 64, "new": 128}]
    assert plan_diff({"hosts": [{"ips": ["a"]}]}, {"hosts": [{"ips": ["b"]}]}) == [
        {"field": "hosts", "old": [{"ips": ["a"]}], "new": [{"ips": ["b"]}]}
    ]
