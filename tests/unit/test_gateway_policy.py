"""Gateway policy: whole-object validation, the persisted file, and the admission arithmetic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.gateway.policy import (
    GB,
    RUNTIME_ALLOWANCE_BYTES,
    Policy,
    PolicyError,
    memory_check,
    parse_policy,
    policy_document,
    read_policy_file,
)
from tests.conftest import assert_valid


def test_policy_round_trips_and_says_when_idle_unload_applies() -> None:
    """A parsed policy serialises back to itself; idle unload needs a timeout and no keep_loaded."""
    raw = {"idle_timeout_s": 600, "keep_loaded": False, "min_headroom_gb": 2}
    policy = parse_policy(raw)
    assert policy.to_json() == raw and policy.idle_unload
    assert not parse_policy({**raw, "keep_loaded": True}).idle_unload
    assert not parse_policy({**raw, "idle_timeout_s": 0}).idle_unload


@pytest.mark.parametrize("raw", [
    {"idle_timeout_s": 1, "keep_loaded": False},
    {"idle_timeout_s": 1, "keep_loaded": False, "min_headroom_gb": None, "extra": 1},
    {"idle_timeout_s": "1", "keep_loaded": False, "min_headroom_gb": None},
    {"idle_timeout_s": True, "keep_loaded": False, "min_headroom_gb": None},
    {"idle_timeout_s": float("inf"), "keep_loaded": False, "min_headroom_gb": None},
    {"idle_timeout_s": 1, "keep_loaded": 1, "min_headroom_gb": None},
    {"idle_timeout_s": 1, "keep_loaded": False, "min_headroom_gb": -2},
    [1, 2, 3],
])
def test_malformed_policies_are_refused(raw: Any) -> None:
    """Missing, unknown, mistyped or negative fields are refused: a policy is replaced whole."""
    with pytest.raises(PolicyError):
        parse_policy(raw)


def test_policy_file_is_schema_valid_and_read_back(tmp_path: Path) -> None:
    """The persisted document validates against its schema and reads back as the same policy."""
    policy = Policy(idle_timeout_s=30, keep_loaded=True, min_headroom_gb=1.5)
    doc = policy_document(policy)
    assert_valid("gateway_policy", doc)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    assert read_policy_file(path) == policy
    assert read_policy_file(tmp_path / "absent.json") is None
    path.write_text("{not json")
    with pytest.raises(PolicyError):
        read_policy_file(path)


def test_admission_requires_weights_times_1_1_plus_allowance_plus_reserve() -> None:
    """Required bytes are weights x 1.10 + 1.5 GB + the reserve in decimal GB; exactly enough is enough."""
    required = 1_100_000_000 + RUNTIME_ALLOWANCE_BYTES + 2 * GB
    ok = memory_check(1_000_000_000, 2, required)
    assert (ok["required_bytes"], ok["ok"], ok["reason"], ok["shortfall_bytes"]) == (required, True, None, 0)
    short = memory_check(1_000_000_000, 2, required - 1)
    assert (short["ok"], short["reason"], short["shortfall_bytes"]) == (False, "insufficient_headroom", 1)
    assert short["checked_at"].endswith("Z")


def test_unknown_weights_or_memory_is_memory_unknown() -> None:
    """Without a weight size or an available-memory reading the check cannot pass."""
    assert memory_check(None, 0, 10**12)["reason"] == "memory_unknown"
    assert memory_check(10, 0, None)["reason"] == "memory_unknown"
