"""A group's plan: hosts from --hosts or a hostfile, the launcher's argv, and each rank's model checks."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from mlx_agent.errors import InvalidArguments
from mlx_agent.plan.group import hosts_from_file, hosts_from_list, launcher_argv, model_expectations
from tests.plan_support import plan_for


@pytest.mark.fast
def test_hosts_run_the_first_locally_and_the_others_over_ssh() -> None:
    """--hosts A,B makes rank 0 this machine (ssh 127.0.0.1, its IP kept for the ring) and B a remote host."""
    assert hosts_from_list(("10.0.0.1", "10.0.0.2")) == [
        {"ssh": "127.0.0.1", "ips": ["10.0.0.1"]},
        {"ssh": "10.0.0.2", "ips": ["10.0.0.2"]},
    ]
    with pytest.raises(InvalidArguments, match="not an IP address"):
        hosts_from_list(("mac1", "mac2"))


@pytest.mark.fast
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
    methods = {Path(check.path).name: check.method for check in model_expectations(source)}
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


def test_a_plan_without_ring_port_holds_none_and_confirm_chooses_a_free_run(tiny_model: Path) -> None:
    """Without --ring-port the plan (and its hash) holds no port; binding fills a free run into argv and group."""
    from mlx_agent.supervise.ring_ports import bind_ring_ports, taken_ports
    from mlx_agent.wire import RING_PORT_PLACEHOLDER

    plan = plan_for(tiny_model, hosts=("127.0.0.1", "127.0.0.1"))
    assert plan["preview_hash"] == plan_for(tiny_model, hosts=("127.0.0.1", "127.0.0.1"))["preview_hash"]
    group, argv = plan["models"][0]["group"], plan["models"][0]["worker"]["argv"]
    assert group is not None and (group["ring_port"], group.get("ring_port_chosen")) == (None, True)
    assert argv[argv.index("--starting-port") + 1] == RING_PORT_PLACEHOLDER
    bound = bind_ring_ports(plan)
    chosen = bound["models"][0]["group"]
    assert chosen is not None and isinstance(chosen["ring_port"], int)
    launched = bound["models"][0]["worker"]["argv"]
    assert launched[launched.index("--starting-port") + 1] == str(chosen["ring_port"])
    assert taken_ports(chosen["ring_port"], chosen) == []  # both of the run's ports were free
    assert plan["models"][0]["worker"]["argv"] == argv  # the reviewed plan is left as it was reviewed
    assert bound["preview_hash"] == plan["preview_hash"]


def test_a_given_ring_port_with_a_port_of_its_run_taken_is_refused(tiny_model: Path) -> None:
    """--ring-port P whose second port is bound is ring_port_in_use, naming the taken port; a free run is kept."""
    from mlx_agent.errors.commands import RingPortInUse
    from mlx_agent.supervise.ring_ports import bind_ring_ports
    from tests.ports import free_ports

    first = free_ports(2)
    plan = plan_for(tiny_model, hosts=("127.0.0.1", "127.0.0.1"), ring_port=first)
    assert bind_ring_ports(plan)["models"][0]["group"]["ring_port"] == first  # type: ignore[index]
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", first + 1))
        squatter.listen()
        with pytest.raises(RingPortInUse) as refused:
            bind_ring_ports(plan)
    assert refused.value.code == "ring_port_in_use" and refused.value.details["taken"] == [first + 1]
