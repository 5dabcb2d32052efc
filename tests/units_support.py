"""Service units for the tests: a model name with odd characters, a unit installed, a unit read as systemd does."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

from tests.conftest import Agent, assert_valid

ODD_NAME = "my model & <tiny> é"


def install(agent: Agent, kind: str, model: Path, port: int, unit_dir: Path, *extra: str) -> dict[str, object]:
    """Preview and confirm a unit; return the confirm's data."""
    args = ["--path", str(model), "--port", str(port), f"--{kind}", "--unit-dir", str(unit_dir), *extra]
    preview = agent.run("serve", "start", *args)
    assert preview.rc == 0, preview.stdout
    assert_valid("serve_plan", preview.data["plan"])
    result = agent.run("serve", "start", *args, "--confirm", "--preview-hash", preview.data["plan"]["preview_hash"])
    assert result.rc == 0, result.stdout
    assert_valid("serve_receipt", result.data["receipt"])
    return result.data


def systemd_words(line: str, *, dollar: bool) -> list[str]:
    """Split a systemd command line the way systemd does for these quoting rules."""
    words = [w.replace("%%", "%") for w in shlex.split(line)]
    return [w.replace("$$", "$") for w in words] if dollar else words


def read_unit(path: Path) -> configparser.ConfigParser:
    """Parse a systemd unit with configparser, keeping key case."""
    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(path, encoding="utf-8")
    return unit
