"""Canonical JSON of a plan, its hash, and the field-by-field difference between two plans."""

from __future__ import annotations

import hashlib
import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TypeVar

    Plan = TypeVar("Plan", bound=Mapping[str, Any])

MISSING = "<absent>"  # what a diff shows for a field one side lacks
NAME_KEYS = ("name", "served_model_name")  # what names a record in a list, so a diff reads models[NAME].field


def canonical_json(obj: Any) -> str:
    """Serialise ``obj`` the one way whose bytes are hashed: sorted keys, no spaces, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def plan_hash(plan: Mapping[str, Any]) -> str:
    """Return the sha256 hex of the canonical plan without its own ``preview_hash``."""
    body = {k: v for k, v in plan.items() if k != "preview_hash"}
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def with_hash(plan: Plan) -> Plan:
    """Return a copy of ``plan`` carrying its ``preview_hash``."""
    hashed: Plan = {**plan, "preview_hash": plan_hash(plan)}  # type: ignore[assignment]  # same keys, plus the hash
    return hashed


def _name_key(value: list[Any]) -> str | None:
    """Return the key naming every record of a list (a file's ``name``, a model's ``served_model_name``)."""
    for key in NAME_KEYS:
        if value and all(isinstance(v, dict) and key in v for v in value):
            return key
    return None


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    key = _name_key(value) if isinstance(value, list) else None
    if isinstance(value, dict) and value:
        for field, sub in value.items():
            _flatten(sub, f"{prefix}.{field}" if prefix else str(field), out)
    elif key is not None:
        # Lists of named records (files, models) diff by name, so one changed file reads as one change.
        for item in value:
            _flatten({k: v for k, v in item.items() if k != key}, f"{prefix}[{item[key]}]", out)
    else:
        out[prefix] = value


def plan_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """List every leaf field that differs, as ``{"field", "old", "new"}`` in field order."""
    flat_old: dict[str, Any] = {}
    flat_new: dict[str, Any] = {}
    _flatten({k: v for k, v in old.items() if k != "preview_hash"}, "", flat_old)
    _flatten({k: v for k, v in new.items() if k != "preview_hash"}, "", flat_new)
    changes = []
    for field in sorted(flat_old.keys() | flat_new.keys()):
        before = flat_old.get(field, MISSING)
        after = flat_new.get(field, MISSING)
        if before != after:
            changes.append({"field": field, "old": before, "new": after})
    return changes
