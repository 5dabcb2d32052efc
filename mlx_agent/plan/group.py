"""One model served by a group of ranks on MLX's own distributed engine (``mlx.launch``), as a plan binds it.

The plan binds the hosts (given as ``--hosts`` or the bytes of a ``--hostfile``), the backend, the rank count,
the parallelism, the ring's first port and the exact launcher argv; confirm writes the reviewed host list
beside the receipt and the launcher reads that copy, so what runs is what was reviewed. Without ``--ring-port``
the plan holds no port (``ring_port`` null, ``ring_port_chosen`` true, ``RING_PORT_PLACEHOLDER`` in the argv), so
its hash stays the same from preview to confirm; confirm picks a free run of ports and fills both in
(``supervise/ring_ports.py``), and the receipt's plan holds the ports that were launched. Rank 0 is this
machine (the front's socket is local): its ``ssh`` is ``127.0.0.1``, so the launcher runs it as its own child.
What the installed mlx_lm cannot run across ranks is refused here, read from its files as runtime selection
does: an architecture with neither ``shard`` (tensor parallel) nor ``PipelineMixin`` (``--pipeline``),
``--pipeline`` without ``model.safetensors.index.json``, adapters and draft models (mlx_lm refuses them in a
group), prompt lookup and the M5 kernel (not built for sharded models), and a backend this mlx lacks.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import DistributedUnsupported

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from mlx_agent.plan.requests import ModelRequest
    from mlx_agent.records.plan import GroupRecord, HostfileRecord, HostRecord, Recipe
    from mlx_agent.worker_contract import ModelCheck

BACKENDS = ("ring", "jaccl")
DEFAULT_RING_PORT = 32323  # mlx.launch's default; never planned: a port is given, or chosen at confirm
LOCAL = "127.0.0.1"


def _ip(value: str, where: str) -> str:
    import ipaddress  # only a group's preview reads hosts

    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        raise InvalidArguments(
            f"{where}: {value!r} is not an IP address (the ring backend connects ranks by IP; give the Macs' "
            "addresses, or a hostfile from mlx.distributed_config)",
            details={"host": value},
        ) from None


def hosts_from_list(given: Sequence[str]) -> list[HostRecord]:
    """Return the hosts of ``--hosts A,B,...``: the first is this machine, run locally, the others over ssh."""
    ips = [_ip(part, "--hosts") for part in given]
    return [{"ssh": LOCAL if index == 0 else ip, "ips": [ip]} for index, ip in enumerate(ips)]


def hosts_from_file(path: Path) -> tuple[list[HostRecord], str]:
    """Return the hosts of a hostfile (``mlx.distributed_config``'s JSON list) and the sha256 of its bytes."""
    import hashlib
    import socket

    try:
        raw = path.read_bytes()
        doc = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise InvalidArguments(f"--hostfile {path} is not readable JSON: {exc}", details={"path": str(path)}) from exc
    if not isinstance(doc, list) or not doc:
        raise InvalidArguments(
            f"--hostfile {path} must hold a non-empty JSON list of hosts", details={"path": str(path)}
        )
    hosts: list[HostRecord] = []
    for index, entry in enumerate(doc):
        if not isinstance(entry, dict) or not isinstance(entry.get("ssh"), str) or not entry["ssh"]:
            raise InvalidArguments(
                f'--hostfile {path}: host {index} needs an "ssh" name', details={"path": str(path), "host": index}
            )
        ips = entry.get("ips", [])
        if not isinstance(ips, list):
            raise InvalidArguments(
                f'--hostfile {path}: host {index}\'s "ips" is not a list', details={"path": str(path)}
            )
        record: HostRecord = {"ssh": entry["ssh"], "ips": [_ip(str(ip), f"--hostfile host {index}") for ip in ips]}
        if isinstance(entry.get("rdma"), list):
            record["rdma"] = [str(device) if device is not None else None for device in entry["rdma"]]
        hosts.append(record)
    first = hosts[0]["ssh"]
    if first not in (LOCAL, "localhost", socket.gethostname()):
        raise InvalidArguments(
            f"--hostfile {path}: the first host ({first}) must be this machine ({socket.gethostname()} or {LOCAL}): "
            "rank 0 serves the front's socket here",
            details={"path": str(path), "first": first},
        )
    hosts[0]["ssh"] = LOCAL  # run as the launcher's own child, not through ssh to itself
    return hosts, hashlib.sha256(raw).hexdigest()


def _refuse(message: str, **details: Any) -> DistributedUnsupported:
    return DistributedUnsupported(message, details=details)


def _architecture(runtime: str, package: str, model_type: str | None) -> tuple[bool, bool]:
    """Return whether the installed runtime's class for ``model_type`` can shard (tensor) and pipeline."""
    from mlx_agent.installed import package_dir
    from mlx_agent.plan.runtime_select import supported_module

    module = supported_module(runtime, model_type or "", None)
    root = package_dir(package, None)
    if module is None or root is None or not (root / "models" / f"{module}.py").is_file():
        return False, False
    text = (root / "models" / f"{module}.py").read_text(encoding="utf-8", errors="replace")
    return "def shard(" in text, "PipelineMixin" in text


def _backend_available(backend: str) -> bool:
    import mlx.core as mx  # only for a group's preview: it costs MLX's start-up

    return bool(mx.distributed.is_available(backend))


def group_plan(
    spec: ModelRequest,
    recipe: Recipe,
    runtime: Mapping[str, Any],
    source: Mapping[str, Any],
    config: dict[str, Any],
    *,
    refused: dict[str, bool],
    hostfile_path: Path,
) -> GroupRecord | None:
    """Return the plan's ``group`` for ``--hosts``/``--hostfile``, or None; refuse what cannot run across ranks.

    ``refused`` names the options asked for that a group cannot take (adapter, draft model, ...), by flag.
    """
    if spec.hosts is None and spec.hostfile is None:
        if spec.pipeline or spec.backend != "ring" or spec.ring_port is not None:
            raise InvalidArguments("--pipeline, --backend and --ring-port apply only with --hosts or --hostfile")
        return None
    if spec.hosts is not None and spec.hostfile is not None:
        raise InvalidArguments("give one of --hosts and --hostfile")
    if not recipe["capabilities"].get("groups") or runtime.get("launcher") != "wrapped":
        raise _refuse(
            f"runtime {recipe['name']} does not serve a model across ranks (only a wrapped runtime whose recipe has "
            "the groups capability does: mlx_lm)",
            runtime=recipe["name"],
        )
    for flag, asked in refused.items():
        if asked:
            raise _refuse(
                f"{flag} cannot be served across ranks (mlx_lm refuses it, or it is not built for shards)", option=flag
            )
    if spec.backend not in BACKENDS:
        raise InvalidArguments(f"--backend must be one of {', '.join(BACKENDS)}", details={"backend": spec.backend})
    tensor, pipeline = _architecture(recipe["name"], recipe["package"], source.get("model_type"))
    if spec.pipeline and not pipeline:
        raise _refuse(
            f"the installed mlx_lm cannot pipeline model type {source.get('model_type')!r}",
            model_type=source.get("model_type"),
            parallelism="pipeline",
        )
    if not spec.pipeline and not tensor:
        raise _refuse(
            f"the installed mlx_lm cannot shard model type {source.get('model_type')!r} (tensor parallel)"
            + ("; it can pipeline: add --pipeline" if pipeline else ""),
            model_type=source.get("model_type"),
            parallelism="tensor",
        )
    if spec.pipeline and not any(f["name"] == "model.safetensors.index.json" for f in source["files"]):
        raise _refuse(
            "--pipeline reads each rank's layers through model.safetensors.index.json, which the model lacks",
            path=source["path"],
        )
    if not _backend_available(spec.backend):
        raise _refuse(f"the installed mlx has no {spec.backend} backend on this machine", backend=spec.backend)
    hostfile: HostfileRecord | None = None
    if spec.hosts is not None:
        hosts = hosts_from_list(spec.hosts)
    else:
        path = Path(spec.hostfile or "").expanduser().absolute()
        hosts, digest = hosts_from_file(path)
        hostfile = {"path": str(path), "sha256": digest}
    if len(hosts) < 2:
        raise InvalidArguments("a group needs at least two hosts", details={"hosts": len(hosts)})
    if spec.backend == "ring" and any(not h["ips"] for h in hosts):
        raise InvalidArguments('the ring backend needs every host\'s IPs ("ips" in the hostfile)')
    return {
        "hosts": hosts,
        "hostfile": hostfile,
        "hostfile_path": str(hostfile_path),
        "backend": "jaccl" if spec.backend == "jaccl" else "ring",
        "ranks": len(hosts),
        "parallelism": "pipeline" if spec.pipeline else "tensor",
        "ring_port": spec.ring_port if spec.backend == "ring" else None,
        "ring_port_chosen": spec.backend == "ring" and spec.ring_port is None,
    }


def ring_port_count(group: GroupRecord) -> int:
    """Return how many consecutive ports a ring group's links take: one per host and IP (mlx.launch's count)."""
    return sum(len(host["ips"]) for host in group["hosts"])


def model_expectations(source: Mapping[str, Any]) -> tuple[ModelCheck, ...]:
    """Return the contract's checks binding the model's files as every host's copy shares them (content, not stat)."""
    from mlx_agent.worker_contract import ModelCheck

    checks: list[ModelCheck] = []
    root = Path(source["path"])
    for record in source["files"]:
        if "sha256" in record:
            method, digest = "sha256", record["sha256"]
        elif "blob" in record:
            method, digest = "blob", record["blob"]
        elif "header_sha256" in record:
            method, digest = "header", record["header_sha256"]
        else:
            method, digest = "size", ""
        checks.append(ModelCheck(str(root / record["name"]), method, digest, record["size"]))
    return tuple(checks)


def launcher_argv(group: GroupRecord, interpreter: str, env: dict[str, str], entry_argv: list[str]) -> list[str]:
    """Return the launcher's argv: our ``mlx.launch`` over the reviewed host list, running the entry on each rank.

    Remote ranks get only the ``--env`` variables, so the worker's whole environment goes there.
    """
    from mlx_agent.wire import LAUNCH_MODULE, RING_PORT_PLACEHOLDER

    argv = [interpreter, "-m", LAUNCH_MODULE, "--hostfile", group["hostfile_path"], "--backend", group["backend"]]
    if group["ring_port"] is not None:
        argv += ["--starting-port", str(group["ring_port"])]
    elif group.get("ring_port_chosen"):
        argv += ["--starting-port", RING_PORT_PLACEHOLDER]  # confirm fills in the run it picked
    for name, value in sorted(env.items()):
        argv += ["--env", f"{name}={value}"]
    return [*argv, "--", *entry_argv, *(["--pipeline"] if group["parallelism"] == "pipeline" else [])]
