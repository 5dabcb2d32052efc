"""A ring group's link ports at confirm: a given ``--ring-port`` checked free, or a free run (docs/distributed.md).

MLX's ring backend listens on one port per host and IP, consecutive from the first (mlx.launch's
``--starting-port``). A fixed default let any local user block every group by binding it first, so a plan
without ``--ring-port`` holds no port (``ring_port_chosen``) and confirm picks a run whose every port is free on
this host; a given run with a port taken is refused before anything starts. Only this host's ports can be
checked: the other hosts' listeners are theirs.
"""

from __future__ import annotations

import copy
import random
import socket

from mlx_agent.errors.commands import RingPortInUse
from mlx_agent.plan.group import LOCAL, ring_port_count
from mlx_agent.supervise.ports import port_is_free
from mlx_agent.wire import RING_PORT_PLACEHOLDER

TYPE_CHECKING = False
if TYPE_CHECKING:
    from mlx_agent.records.plan import GroupRecord, ServePlan

ATTEMPTS = 200
CHOSEN_PORTS = range(10000, 20000)  # where confirm draws a run (``choose_run``)


def local_hosts(group: GroupRecord) -> list[str]:
    """Return the addresses this host's ranks listen on (the hosts run here: ssh 127.0.0.1), plus loopback.

    An address this host does not have is left out: its rank cannot bind it whatever the port, and says so.
    IPv6 addresses are left out too (``port_is_free`` binds IPv4, as the ring's hostfiles here are).
    """
    ips = {ip for host in group["hosts"] if host["ssh"] == LOCAL for ip in host["ips"]}
    return sorted(ip for ip in ips | {LOCAL} if _assigned(ip))


def _assigned(ip: str) -> bool:
    if ":" in ip:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((ip, 0))
        except OSError:
            return False
    return True


def taken_ports(first: int, group: GroupRecord) -> list[int]:
    """Return the ports of the run from ``first`` that cannot be bound on this host now."""
    hosts = local_hosts(group)
    run = range(first, first + ring_port_count(group))
    return [port for port in run if port > 65535 or not all(port_is_free(port, host) for host in hosts)]


def choose_run(group: GroupRecord, *, avoid: set[int] | None = None) -> int:
    """Return the first port of a run that is free on this host now, none of it in ``avoid``.

    The run is drawn at random from ``CHOSEN_PORTS``, below the range the kernel hands out for outgoing
    connections (32768 up on Linux, 49152 on macOS): a run there would be taken by the ranks' own connections to
    each other (Linux gives connect() the even ports next to the odd one bind(0) returned).
    """
    count = ring_port_count(group)
    avoid = avoid or set()
    for _ in range(ATTEMPTS):
        first = random.randrange(CHOSEN_PORTS.start, CHOSEN_PORTS.stop - count + 1)
        if avoid.isdisjoint(range(first, first + count)) and not taken_ports(first, group):
            return first
    raise RingPortInUse(
        f"no run of {count} free consecutive ports found for the group's links in {ATTEMPTS} tries",
        details={"ports": count},
        remediation="Free some loopback ports, or give --ring-port with a free run.",
    )


def bind_ring_ports(plan: ServePlan) -> ServePlan:
    """Return the plan to launch: each ring group's ports checked (given) or chosen, and filled into its argv.

    The reviewed plan is not changed; its ``preview_hash`` stays that of the plan that was reviewed.
    """
    bound = copy.deepcopy(plan)
    used: set[int] = set()
    for model in bound["models"]:
        group = model.get("group")
        if group is None or group["backend"] != "ring":
            continue
        count = ring_port_count(group)
        if group.get("ring_port_chosen"):
            first = choose_run(group, avoid=used)
            argv = model["worker"]["argv"]
            model["worker"]["argv"] = [str(first) if word == RING_PORT_PLACEHOLDER else word for word in argv]
            group["ring_port"] = first
        else:
            first = int(group["ring_port"] or 0)
            taken = taken_ports(first, group)
            clash = sorted(used.intersection(range(first, first + count)))
            if taken or clash:
                raise RingPortInUse(
                    f"--ring-port {first}: port {(taken or clash)[0]} of the group's {count} link ports "
                    f"({first}-{first + count - 1}) is already bound on this host",
                    details={"model": model["served_model_name"], "ring_port": first, "ports": count, "taken": taken},
                )
        used.update(range(first, first + count))
    return bound


def check_given_ring_ports(plan: ServePlan) -> None:
    """Refuse a given ``--ring-port`` whose run is not free on this host (``ring_port_in_use``), at preview too."""
    if any((group := m.get("group")) is not None and not group.get("ring_port_chosen") for m in plan["models"]):
        bind_ring_ports(plan)
