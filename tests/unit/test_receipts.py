"""Receipts: atomic private writes and strict reads."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors.commands import ReceiptCorrupt, ReceiptNotFound, ReceiptVersionUnsupported
from mlx_agent.files import stale_temps, temp_name
from mlx_agent.supervise.receipts import has_front, read_receipt, receipt_files, write_receipt

RECEIPT: Any = {
    "format_version": "2.0",
    "kind": "serve",
    "port": 8080,
    "pid": 1,
    "pgid": 1,
    "create_time": 1.5,
    "argv": ["x"],
}


@pytest.mark.fast
def test_receipt_is_private_and_leaves_no_temp_file(tmp_path: Path) -> None:
    """A written receipt has mode 0600 and its temp file is gone."""
    path = write_receipt(tmp_path, RECEIPT)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["8080.json"]
    assert read_receipt(path) == RECEIPT


@pytest.mark.fast
def test_missing_receipt_is_receipt_not_found(tmp_path: Path) -> None:
    """Reading an absent receipt is receipt_not_found."""
    with pytest.raises(ReceiptNotFound):
        read_receipt(tmp_path / "1.json")


@pytest.mark.fast
@pytest.mark.parametrize("content", ["{not json", "[]", json.dumps({"port": 1}), json.dumps({**RECEIPT, "pid": "12"})])
def test_corrupt_receipt_is_receipt_corrupt(tmp_path: Path, content: str) -> None:
    """Unparsable, incomplete or ill-typed receipts are receipt_corrupt."""
    path = tmp_path / "8080.json"
    path.write_text(content)
    with pytest.raises(ReceiptCorrupt):
        read_receipt(path)


@pytest.mark.fast
def test_unknown_major_version_is_refused_and_older_ones_read(tmp_path: Path) -> None:
    """A receipt of major version 4 is refused; 3.x with unknown extra fields, and older 2.x and 1.x, are read."""
    path = tmp_path / "8080.json"
    path.write_text(json.dumps({**RECEIPT, "format_version": "4.0"}))
    with pytest.raises(ReceiptVersionUnsupported):
        read_receipt(path)
    path.write_text(json.dumps({**RECEIPT, "format_version": "3.7", "future": True}))
    assert dict(read_receipt(path))["future"] is True
    path.write_text(json.dumps({**RECEIPT, "format_version": "2.0"}))
    assert read_receipt(path)["format_version"] == "2.0"
    path.write_text(json.dumps({**RECEIPT, "format_version": "1.0"}))
    assert read_receipt(path)["format_version"] == "1.0"


@pytest.mark.fast
def test_a_front_receipt_without_its_front_is_corrupt(tmp_path: Path) -> None:
    """A 3.x receipt whose plan lacks the front record (or whose model lists are not lists) is receipt_corrupt."""
    path = tmp_path / "8080.json"
    for plan, models in (({"models": []}, []), ({"front": {}, "models": {}}, []), ({"front": {}, "models": []}, 7)):
        path.write_text(json.dumps({**RECEIPT, "format_version": "3.0", "plan": plan, "models": models}))
        with pytest.raises(ReceiptCorrupt, match="front or models"):
            read_receipt(path)
    path.write_text(json.dumps({**RECEIPT, "format_version": "3.0", "plan": {"front": {}, "models": []}, "models": []}))
    assert has_front(read_receipt(path))


@pytest.mark.fast
def test_receipt_files_are_ordered_by_port(tmp_path: Path) -> None:
    """Receipts list in port order and other files are ignored."""
    for port in (9000, 80, 8080):
        receipt: Any = dict(RECEIPT, port=port)
        write_receipt(tmp_path, receipt)
    (tmp_path / "8080.log").write_text("")
    assert [p.name for p in receipt_files(tmp_path)] == ["80.json", "8080.json", "9000.json"]


@pytest.mark.fast
def test_an_older_receipt_is_read_under_the_seed_names(tmp_path: Path) -> None:
    """A 0.2.0 receipt's prompt_lookup, m5_prefill, name and aliases (flat and in its plan) read as today's names."""
    lookup = {"requested": True, "applied": False, "reasons": ["r1"]}
    prefill = {"requested": True, "eligible": False, "reasons": ["r2"]}
    model = {"name": "m", "aliases": ["a"], "prompt_lookup": lookup, "m5_prefill": prefill}
    path = tmp_path / "8080.json"
    plan = {"front": {}, "models": [{**model, "source": {}}]}
    path.write_text(json.dumps({**RECEIPT, "models": [model], "plan": plan}))
    receipt = read_receipt(path)
    assert has_front(receipt)
    current = {"served_model_name": "m", "alias": ["a"], "decode_profile": lookup, "prefill_kernel": prefill}
    assert receipt["models"] == [current]
    planned: Any = {**current, "source": {}}
    assert receipt["plan"]["models"] == [planned]


@pytest.mark.fast
def test_an_older_receipts_prompt_cache_limit_reads_in_gb(tmp_path: Path) -> None:
    """A 0.2.0 plan's prompt_cache.disk_limit_bytes reads as --prompt-cache-disk-gb's disk_gb, as status shows it."""
    kept = {"root": "/home/prompt-cache", "disk_limit_bytes": 2_500_000_000}
    models = [{"served_model_name": "m", "prompt_cache": kept}, {"served_model_name": "n", "prompt_cache": None}]
    plan = {"front": {}, "models": models}
    path = tmp_path / "8080.json"
    path.write_text(json.dumps({**RECEIPT, "models": [], "plan": plan}))
    receipt = read_receipt(path)
    assert has_front(receipt)
    assert [m["prompt_cache"] for m in receipt["plan"]["models"]] == [
        {"root": "/home/prompt-cache", "disk_gb": 2.5},
        None,
    ]


@pytest.mark.fast
def test_a_current_receipt_keeps_its_names(tmp_path: Path) -> None:
    """A receipt that already has today's names is read unchanged, even beside stray older keys."""
    model = {"served_model_name": "m", "decode_profile": {"requested": False}, "prompt_lookup": "stray", "name": "x"}
    receipt: Any = {**RECEIPT, "models": [model], "plan": {"front": {}, "models": []}}
    path = write_receipt(tmp_path, receipt)
    read = read_receipt(path)
    assert has_front(read)
    assert read["models"] == [model]


def test_a_receipt_write_sweeps_the_temp_files_of_dead_writers_only(tmp_path: Path) -> None:
    """A temp file left by a SIGKILLed writer goes at the next receipt write; a live writer's and others' stay."""
    import os
    import signal
    import subprocess
    import sys

    code = (
        "import os, sys; from pathlib import Path; from mlx_agent.files import temp_name; "
        f"t = temp_name(Path({str(tmp_path / '8081.front.json')!r})); os.close(os.open(t, os.O_CREAT | os.O_WRONLY)); "
        "print(t, flush=True); sys.stdin.read()"
    )
    writer = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None
    dead = Path(writer.stdout.readline().strip())
    writer.send_signal(signal.SIGKILL)  # killed between creating its temp file and renaming it, as a confirm can be
    writer.wait()
    live = temp_name(tmp_path / "8082.front.json")  # this process's: alive
    live.write_text("{}")
    kept = [tmp_path / ".8083.json.tmp", tmp_path / f".8084.json.{writer.pid}.zz.tmp"]  # not the pattern
    for path in kept:
        path.write_text("{}")
    link = tmp_path / f".8085.json.{writer.pid}.{'a' * 12}.tmp"
    link.symlink_to(tmp_path / "elsewhere")
    if os.geteuid() == 0:  # another user's file of our pattern: not ours to remove
        others = tmp_path / f".8086.json.{writer.pid}.{'b' * 12}.tmp"
        others.write_text("{}")
        os.chown(others, 65534, 65534)
        kept.append(others)
    assert dead.exists() and stale_temps(tmp_path) == [dead]
    write_receipt(tmp_path, RECEIPT)
    assert not dead.exists()
    assert all(p.exists() for p in [live, *kept]) and link.is_symlink()
