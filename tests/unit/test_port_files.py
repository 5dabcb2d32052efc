"""The files of a port are named once (``port_files``), with the names earlier versions wrote on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlx_agent.plan.front import front_paths, socket_dir, worker_paths
from mlx_agent.port_files import PortFiles, is_receipt_name
from mlx_agent.supervise.receipts import log_path, receipt_files, receipt_path

pytestmark = pytest.mark.fast

# What a server on port 8080 left in its serve directory before the names were declared once (on disk, so fixed).
ON_DISK = {
    "receipt": "8080.json",
    "log": "8080.log",
    "lock": "8080.lock",
    "front_config": "8080.front.json",
    "token": "8080.token",
    "policy": "8080.policy.json",
    "sockets": "8080.sockets",
}


def test_names_are_the_ones_on_disk(tmp_path: Path) -> None:
    """Each per-port file keeps the name an earlier version gave it, workers' logs and host lists included."""
    files = PortFiles(tmp_path, 8080)
    assert {name: getattr(files, name) for name in ON_DISK} == {k: tmp_path / v for k, v in ON_DISK.items()}
    assert [files.worker_log(i).name for i in (0, 1, 2)] == [
        "8080.worker.log",
        "8080.worker-1.log",
        "8080.worker-2.log",
    ]
    assert [files.worker_hosts(i).name for i in (0, 1)] == ["8080.worker.hosts.json", "8080.worker-1.hosts.json"]


def test_plan_and_supervise_read_the_record(tmp_path: Path) -> None:
    """The plan's front and worker paths and supervise's receipt and log paths are the record's."""
    files = PortFiles(tmp_path, 9000)
    assert front_paths(tmp_path, 9000) == {
        "config_path": str(files.front_config),
        "token_path": str(files.token),
        "policy_path": str(files.policy),
    }
    assert worker_paths(tmp_path, 9000, 3) == (files.worker_log(3), files.worker_hosts(3))
    short = Path("/tmp/x")  # the sockets' directory of a short state path (a long one gets a temporary one)
    assert socket_dir(short, 9000) == str(PortFiles(short, 9000).sockets)
    assert (receipt_path(tmp_path, 9000), log_path(tmp_path, 9000)) == (files.receipt, files.log)


def test_an_old_receipt_is_found_among_the_other_files(tmp_path: Path) -> None:
    """A receipt an earlier version wrote is listed; the front's config, policy and hosts beside it are not."""
    for name in ["8080.json", "8080.front.json", "8080.policy.json", "8080.worker.hosts.json", "9.json", "x.json"]:
        (tmp_path / name).write_text(json.dumps({}))
    assert receipt_files(tmp_path) == [tmp_path / "9.json", tmp_path / "8080.json"]
    assert not is_receipt_name("8080.front.json") and is_receipt_name("8080.json")


def test_worker_logs_of_a_port_without_receipt(tmp_path: Path) -> None:
    """The worker logs of a port are its own (``80.worker*``), not another port's that starts alike."""
    for name in ["80.worker.log", "80.worker-1.log", "8080.worker.log", "80.log"]:
        (tmp_path / name).write_text("")
    assert [p.name for p in PortFiles(tmp_path, 80).worker_logs()] == ["80.worker-1.log", "80.worker.log"]
