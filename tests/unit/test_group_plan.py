"""A group's plan: hosts from --hosts or a hostfile, the launcher's argv, and each rank's model checks."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from mlx_agent.errors import InvalidArguments
from mlx_agent.plan.group import hosts_from_file, hosts_from_list, launcher_argv, model_expectations
from tests.unit.test_serve_plan import plan_for


def test_hosts_run_the_first_locally_and_the_others_over_ssh() -> None:
    """--hosts A,B makes rank 0 this machine (ssh 127.0.0.1, its IP kept for the ring) and B a remote host."""
    assert hosts_from_list(("10.0.0.1", "10.0.0.2")) == [
        {"ssh": "127.0.0.1", "ips": ["10.0.0.1"]},
        {"ssh": "10.0.0.2", "ips": ["10.0.0.2"]},
    ]
    with pytest.raises(InvalidArguments, match="not an IP address"):
        hosts_from_list(("mac1", "mac2"))


def test_a_hostfile_must_start_with_this_machine(tmp_path: Path) -> None:
    """A hostfile whose first host is this machine is taken (run locally), with its sha256; another is refused."""
    path = tmp_path / "hosts.json"
    doc = [{"ssh": socket.gethostname(), "ips": ["10.0.0.1"]}, {"ssh": "mac2", "ips": ["10.0.0.2"], "rdma": [None]}]
    path.write_text(json.dumps(doc))
    hosts, digest = hosts_from_file(path)
    assert hosts[0] == {"ssh": "127.0.0.1", "ips": ["10.0.0.1"]} and hosts[1]["rdma"] == [None] and len(digest) == 64
    path.write_text(json.dumps(list(reversed(doc))))
    with pytest.raises(InvalidArguments, match="must be this machine"):
        hosts_from_file(path)
    path.write_text("{}")
    with pytest.raises(InvalidArguments):
        hosts_from_file(path)


def test_each_file_is_checked_by_what_every_copy_shares(tiny_model: Path) -> None:
    """Small files by sha256, weights by their safetensors header; never by inode or mtime."""
    source = plan_for(tiny_model)["models"][0]["source"]
    values = model_expectations(source)[1::2]
    methods = {value.split("=", 1)[0].rsplit("/", 1)[1]: value.split("=", 1)[1].split(":")[0] for value in values}
    assert methods["config.json"] == "sha256" and methods["model.safetensors"] == "header"


def test_the_launcher_argv_carries_the_environment_and_the_parallelism(tiny_model: Path, tmp_path: Path) -> None:
    """The launcher reads the reviewed hostfile, passes the worker's environment to every rank, and --pipeline."""
    group = {
        "hosts": [{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2,
        "hostfile": None,
        "hostfile_path": str(tmp_path / "9.worker.hosts.json"),
        "backend": "ring",
        "ranks": 2,
        "parallelism": "pipeline",
        "ring_port": 40000,
    }
    argv = launcher_argv(group, sys.executable, {"HF_HUB_OFFLINE": "1"}, ["python", "-m", "entry"])  # type: ignore[arg-type]
    assert argv[:3] == [sys.executable, "-m", "mlx_agent.runtime.distributed.launcher"]
    assert argv[argv.index("--hostfile") + 1] == group["hostfile_path"]
    assert argv[argv.index("--starting-port") + 1] == "40000" and "HF_HUB_OFFLINE=1" in argv
    assert argv[argv.index("--") + 1 :] == ["python", "-m", "entry", "--pipeline"]
