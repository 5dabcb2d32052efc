"""Starting a server: preview, then confirm (gates, launch, readiness, receipt) under the port lock."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from mlx_agent.canonical import with_hash
from mlx_agent.errors import PortInUse
from mlx_agent.errors.commands import LaunchInterrupted, PortClaimed
from mlx_agent.files import open_private, private_dir, utc_now
from mlx_agent.home import previews_dir, wired_dir
from mlx_agent.plan.serve_plan import build_serve_plan, model_ids
from mlx_agent.plan.wired import claims_on_port, read_wired
from mlx_agent.spawn import send_word, spawn
from mlx_agent.supervise import process
from mlx_agent.supervise.front import check_front_paths, front_executable, remove_front_files, write_front_files
from mlx_agent.supervise.locks import port_lock
from mlx_agent.supervise.ports import port_is_free
from mlx_agent.supervise.previews import reviewed_plan, save_preview
from mlx_agent.supervise.readiness import Tick, launch_failed, wait_ready
from mlx_agent.supervise.receipts import is_unit, log_path, plan_receipt, read_receipt, receipt_path, write_receipt
from mlx_agent.supervise.ring_ports import bind_ring_ports, check_given_ring_ports

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess

    from mlx_agent.plan.requests import ServeRequest
    from mlx_agent.records.plan import ProcessIdentity, ServePlan
    from mlx_agent.records.receipt import ServeReceipt


def gates(plan: ServePlan, directory: Path, *, cleanup: bool) -> list[str]:
    """Refuse a port that is ours and live, claimed by a wired config, or bound by anyone; return warnings.

    With ``cleanup`` a receipt whose process has gone is removed (confirm does this, preview only reports).
    """
    port = plan["port"]
    warnings: list[str] = []
    path = receipt_path(directory, port)
    if path.exists():
        receipt = read_receipt(path)
        if is_unit(receipt):
            raise PortInUse(
                f"port {port} has a {receipt['supervisor']} unit installed by mlx-agent",
                details={"port": port, "unit": receipt["unit"]["path"], "receipt": str(path)},
                remediation="Run `mlx-agent serve stop --port N --uninstall` first, or choose another --port.",
            )
        state = process.classify(receipt)
        if state == "running":
            raise PortInUse(
                f"port {port} already runs a server of ours (pid {receipt['pid']})",
                details={"port": port, "pid": receipt["pid"], "receipt": str(path)},
            )
        if cleanup:
            path.unlink(missing_ok=True)
            warnings.append(f"removed the stale receipt of port {port} (its process is {state})")
        else:
            warnings.append(f"the receipt of port {port} is stale (its process is {state}); confirm replaces it")
    configs, wired_warnings = read_wired(wired_dir())
    warnings.extend(wired_warnings)
    runtimes = {m["runtime"]["name"] for m in plan["models"]}
    claims = claims_on_port(configs, port, runtimes, model_ids(plan))
    if claims:
        raise PortClaimed(
            f"port {port} is claimed by a wired config for another server", details={"port": port, "claims": claims}
        )
    if plan.get("unit") is not None:
        from mlx_agent.supervise.units import check_unit_path

        check_unit_path(plan)
    check_front_paths(plan)
    if not port_is_free(port, plan["host"]):
        raise PortInUse(f"port {port} on {plan['host']} is already bound by another program", details={"port": port})
    check_given_ring_ports(plan)
    from mlx_agent.disk import floor_warnings, server_places
    from mlx_agent.kept_cache import disk_warnings

    kept = {m["prompt_cache"]["root"]: m["prompt_cache"]["disk_gb"] for m in plan["models"] if m["prompt_cache"]}
    places = server_places(Path(plan["front"]["policy_path"]).parent, plan["models"])
    # A disk under its floor (a warning: the server runs degraded), and the effective cache limit: not in the plan.
    return warnings + floor_warnings(places) + disk_warnings(kept)


def preview(req: ServeRequest, directory: Path) -> tuple[ServePlan, list[str]]:
    """Build, gate and save the plan for review; start nothing."""
    plan = with_hash(build_serve_plan(req))
    warnings = gates(plan, directory, cleanup=False)
    if req.models is not None:
        from mlx_agent.plan.models_file import older_spellings

        warnings.extend(older_spellings(req.models))
    save_preview(previews_dir(), plan)
    return plan, warnings


def check_preview(req: ServeRequest, preview_hash: str | None) -> ServePlan:
    """Rebuild the plan and return it if its hash is the reviewed one; otherwise say what changed."""
    return reviewed_plan(lambda: build_serve_plan(req), preview_hash)


class _Interrupts:
    """Turn SIGINT, SIGTERM and SIGHUP into KeyboardInterrupt during a launch, deferring them while held.

    Between spawning the child and recording it in a receipt an interrupt would leave a process that
    nobody owns, so inside ``held()`` a signal is only noted and raised when the section ends.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.holding = False
        self.pending = False

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.holding:
            self.pending = True
        else:
            raise KeyboardInterrupt

    @contextmanager
    def installed(self) -> Iterator[None]:
        saved = {sig: signal.signal(sig, self._handler) for sig in self.SIGNALS}
        try:
            yield
        finally:
            for sig, old in saved.items():
                signal.signal(sig, old)

    @contextmanager
    def held(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.pending:
            raise KeyboardInterrupt


def _receipt(plan: ServePlan, identity: ProcessIdentity, log: Path) -> ServeReceipt:
    me = process.identity(os.getpid())  # the confirming CLI: a server still starting without it is orphaned
    receipt: ServeReceipt = {
        **plan_receipt(plan, "mlx-agent", str(log)),
        **identity,
        "started_at": utc_now(),
        "ready_at": None,
        "confirm_pid": me["pid"],
        "confirm_create_time": me["create_time"],
    }
    if "start_ticks" in me:
        receipt["confirm_start_ticks"] = me["start_ticks"]
    return receipt


def _launch(plan: ServePlan, directory: Path, on_tick: Tick | None, interrupts: _Interrupts) -> ServeReceipt:
    """Spawn, record, wait; on any failure stop the child and remove its receipt (we hold the port lock)."""
    log = log_path(directory, plan["port"])
    child: subprocess.Popen[bytes] | None = None
    try:
        private_dir(log.parent)
        os.close(open_private(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))  # a fresh log; a planted link is refused
        executable = front_executable(plan)  # the reviewed interpreter file, argv[0] kept and never followed
        with interrupts.held():
            # The front waits for our word before it reads a file or listens, and we give it only once its receipt
            # is on disk: a CLI killed before that closes the pipe and the front ends, so no front runs unnamed.
            child = spawn(plan["argv"], plan["env"], log, plan["cwd"], awaits_word=True, executable=executable)
            try:
                identity = process.identity(child.pid)
            except ProcessLookupError:
                raise launch_failed(child.wait(), log) from None
            receipt = _receipt(plan, identity, log)
            write_receipt(directory, receipt)
            send_word(child)
        wait_ready(child, plan, log, on_tick, tick_log=Path(plan["models"][0]["worker"]["log_path"]))
        receipt["ready_at"] = utc_now()
        write_receipt(directory, receipt)
        return receipt
    except BaseException as exc:
        if child is not None:
            process.stop_group(child.pid, child.pid, grace=5.0, child=child)
            receipt_path(directory, plan["port"]).unlink(missing_ok=True)
        remove_front_files(plan)
        if isinstance(exc, KeyboardInterrupt):
            raise LaunchInterrupted(
                "the launch was interrupted; the server was stopped", details={"log_path": str(log)}
            ) from None
        raise


def confirm(
    req: ServeRequest, preview_hash: str | None, directory: Path, on_tick: Tick | None = None
) -> tuple[ServeReceipt, list[str]]:
    """Launch the reviewed plan under the port lock and return its receipt once the model answers."""
    plan = bind_ring_ports(check_preview(req, preview_hash))  # a ring group's ports: given and free, or chosen now
    if plan.get("unit") is not None:
        from mlx_agent.supervise import units

        with port_lock(directory, plan["port"], timeout=0, busy=PortInUse):
            warnings = gates(plan, directory, cleanup=True)
            write_front_files(plan)  # the unit runs the same front, which reads them at every start
            try:
                return units.install(plan, directory, utc_now()), warnings
            except BaseException:
                remove_front_files(plan)
                raise
    interrupts = _Interrupts()
    with port_lock(directory, plan["port"], timeout=0, busy=PortInUse), interrupts.installed():
        warnings = gates(plan, directory, cleanup=True)
        write_front_files(plan)
        return _launch(plan, directory, on_tick, interrupts), warnings
