"""Policy: whole-object validation in one place, the persisted file, and the admission arithmetic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import FrontConfigInvalid, PolicyRejected
from mlx_agent.gateway.models.admission import policy_file, read_policy_file
from mlx_agent.load_memory import GB, RUNTIME_ALLOWANCE_BYTES, memory_check
from mlx_agent.policy import Policy, parse_policy, policy_from_options
from tests.conftest import assert_valid

pytestmark = pytest.mark.fast


def test_policy_round_trips_and_says_when_idle_unload_applies() -> None:
    """A parsed policy serialises back to itself; idle unload needs a timeout and no keep_loaded."""
    raw = {"idle_timeout": 600, "keep_loaded": False, "min_headroom_gb": 2}
    policy = parse_policy(raw)
    assert policy.to_json() == raw and policy.idle_unload
    assert not parse_policy({**raw, "keep_loaded": True}).idle_unload
    assert not parse_policy({**raw, "idle_timeout": 0}).idle_unload


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"idle_timeout": 1, "keep_loaded": False}, "min_headroom_gb"),
        ({"idle_timeout": 1, "keep_loaded": False, "min_headroom_gb": None, "extra": 1}, "extra"),
        ({"idle_timeout": "1", "keep_loaded": False, "min_headroom_gb": None}, "idle_timeout"),
        ({"idle_timeout": True, "keep_loaded": False, "min_headroom_gb": None}, "idle_timeout"),
        ({"idle_timeout": float("inf"), "keep_loaded": False, "min_headroom_gb": None}, "idle_timeout"),
        ({"idle_timeout": 1, "keep_loaded": 1, "min_headroom_gb": None}, "keep_loaded"),
        ({"idle_timeout": 1, "keep_loaded": False, "min_headroom_gb": -2}, "min_headroom_gb"),
        ([1, 2, 3], "policy"),
    ],
)
def test_malformed_policies_are_refused_naming_the_field(raw: Any, field: str) -> None:
    """Missing, unknown, mistyped or negative fields are refused: a policy is replaced whole."""
    with pytest.raises(PolicyRejected) as info:
        parse_policy(raw)
    assert info.value.details["field"] == field


def test_the_options_build_the_policy_through_the_same_rules() -> None:
    """--idle-timeout omitted means 0 (never), and a negative value is refused by the one parser."""
    assert policy_from_options(None, False, None) == Policy(0, False, None)
    with pytest.raises(PolicyRejected):
        policy_from_options(-1, False, None)


def test_policy_file_is_schema_valid_and_read_back(tmp_path: Path) -> None:
    """The persisted document validates against its schema and reads back as the same policies."""
    doc = policy_file(1.5, {"org/tiny": Policy(30, True), "org/small": Policy(0, False)})
    assert_valid("front_policy", doc)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    reserve, policies = read_policy_file(path) or (None, {})
    assert reserve == 1.5 and policies["org/tiny"] == Policy(30, True, 1.5)
    assert read_policy_file(tmp_path / "absent.json") is None
    path.write_text("{not json")
    with pytest.raises(FrontConfigInvalid):
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
