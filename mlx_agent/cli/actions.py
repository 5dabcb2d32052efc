"""What each command does with its record once the options are parsed (the Click CLI and the fast path alike)."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from mlx_agent.cli.lora_actions import LORA_ACTIONS, render
from mlx_agent.cli.output import run
from mlx_agent.home import receipts_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.cli.output import Launched, Previewed, Result
    from mlx_agent.plan.options import Record
    from mlx_agent.plan.requests import (
        LogsRequest,
        PolicyRequest,
        ServeRequest,
        StatusRequest,
        StopRequest,
        UnloadRequest,
    )
    from mlx_agent.supervise.readiness import Tick


def _serve_dir(req: Record) -> Path:
    return receipts_dir("serve", getattr(req, "receipts_dir", None))


def serve_start(req: ServeRequest, flags: dict[str, Any]) -> None:
    """Preview a server plan, or launch it with --confirm."""
    as_json = bool(flags["json"])
    directory = _serve_dir(req)

    def hashing() -> AbstractContextManager[None]:
        """Return a fresh progress bar for each hashing (a preview answered yes hashes twice)."""
        if req.verify_weights and not as_json:
            from mlx_agent.cli.render import hash_progress

            return hash_progress("hashing weights")
        return nullcontext()

    def preview() -> tuple[Previewed, list[str]]:
        from mlx_agent.plan.agent_support import agent_warnings
        from mlx_agent.supervise.serve import preview as build_preview

        with hashing():
            plan, warnings = build_preview(req, directory)
        return {"plan": plan, "requires_confirmation": True}, warnings + agent_warnings(plan["models"])

    def confirm() -> tuple[Launched, list[str]]:
        from mlx_agent.supervise.serve import confirm as launch

        spin: AbstractContextManager[Tick | None] = nullcontext(None)
        if not as_json:
            from mlx_agent.cli.render import spinner

            spin = spinner("loading the model")
        from mlx_agent.plan.agent_support import agent_warnings

        with hashing(), spin as tick:
            receipt, warnings = launch(req, flags["preview_hash"], directory, tick)
        path = str(directory / f"{receipt['port']}.json")
        warnings += agent_warnings(receipt["plan"]["models"])
        return {"receipt": receipt, "receipt_path": path, "requires_confirmation": False}, warnings

    if not flags["confirm"]:
        from mlx_agent.cli.ask import preview_and_ask

        reviewed = preview_and_ask("serve.start", as_json, "Launch", preview, render("render_preview"))
        if reviewed is None:
            return
        flags = {**flags, "confirm": True, "preview_hash": reviewed}  # what ``confirm`` reads: the plan shown
    run("serve.start", as_json, confirm, render("render_receipt"))


def serve_status(req: StatusRequest, flags: dict[str, Any]) -> None:
    """Show each server with a receipt, checked against the live process."""
    from mlx_agent.home import wired_dir
    from mlx_agent.plan.wired import loopback_claims, read_wired
    from mlx_agent.supervise.servers import status

    directory = _serve_dir(req)

    def action() -> Result:
        configs, warnings = read_wired(wired_dir())
        claims = [c for c in loopback_claims(configs) if req.port in (None, c["port"])]
        return {
            "receipts_dir": str(directory),
            "servers": status(directory, req.port, verify=req.verify),
            "claims": claims,
        }, warnings

    run("serve.status", bool(flags["json"]), action, render("render_status"))


def serve_stop(req: StopRequest, flags: dict[str, Any]) -> None:
    """Stop the server on a port, only if the live process is the one its receipt started."""
    from mlx_agent.supervise.servers import stop

    directory = _serve_dir(req)
    run(
        "serve.stop",
        bool(flags["json"]),
        lambda: stop(directory, req.port, uninstall=req.uninstall),
        render("render_stop"),
    )


def serve_unload(req: UnloadRequest, flags: dict[str, Any]) -> None:
    """Release a server's loaded models; its front stays up and loads again on the next request."""
    from mlx_agent.supervise.front import unload

    directory = _serve_dir(req)
    run(
        "serve.unload",
        bool(flags["json"]),
        lambda: (unload(directory, req.port, req.expected_pid, req.model), []),
        render("render_control"),
    )


def serve_policy(req: PolicyRequest, flags: dict[str, Any]) -> None:
    """Replace the whole idle and memory policy of a live server's front."""
    from mlx_agent.policy import policy_from_options
    from mlx_agent.supervise.front import replace_policy

    directory = _serve_dir(req)

    def action() -> Result:
        new = policy_from_options(req.idle_timeout, req.keep_loaded, req.min_headroom_gb)
        return replace_policy(directory, req.port, req.expected_pid, new, req.model), []

    run("serve.policy", bool(flags["json"]), action, render("render_control"))


def serve_logs(req: LogsRequest, flags: dict[str, Any]) -> None:
    """Print the front's and its workers' logs (request lines included); --follow keeps printing new lines."""
    from mlx_agent.supervise import logs

    directory = _serve_dir(req)
    as_json = bool(flags["json"])
    if not req.follow:
        run(
            "serve.logs",
            as_json,
            lambda: (logs.read_logs(directory, req.port, req.model, req.lines), []),
            render("render_logs"),
        )
        return
    import json
    import sys

    from mlx_agent.cli.output import fail
    from mlx_agent.errors import MlxAgentError

    def emit(source: str, line: str) -> None:
        if as_json:  # one JSON object per line, as it is written
            doc: dict[str, Any] = {"source": source, "line": line}
            request = logs.request_of(line) if source == logs.FRONT_SOURCE else None
            if request is not None:
                doc["request"] = request
            sys.stdout.write(json.dumps(doc, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(f"{source}: {line}\n")
        sys.stdout.flush()

    try:
        for _ in logs.follow(directory, req.port, req.model, req.lines, emit):
            pass
    except MlxAgentError as exc:
        fail("serve.logs", exc, as_json)
    except (KeyboardInterrupt, BrokenPipeError):
        pass


ACTIONS: dict[tuple[str, str], Any] = {
    ("serve", "start"): serve_start,
    ("serve", "status"): serve_status,
    ("serve", "stop"): serve_stop,
    ("serve", "unload"): serve_unload,
    ("serve", "policy"): serve_policy,
    ("serve", "logs"): serve_logs,
    **LORA_ACTIONS,
}


def dispatch(key: tuple[str, str], record: Record, flags: dict[str, Any]) -> None:
    """Run a command's action, reporting any mlx-agent error as the envelope or a message, with its exit code.

    Errors raised before an action's own boundary (resolving the state directory, say) are reported too.
    """
    from mlx_agent.cli.output import fail
    from mlx_agent.errors import MlxAgentError, StateWriteFailed

    try:
        ACTIONS[key](record, flags)
    except MlxAgentError as exc:
        fail(".".join(key), exc, bool(flags.get("json")))
    except OSError as exc:  # a full disk or a failing file system under any step: an envelope, not a traceback
        failed = StateWriteFailed(
            f"a file operation failed: {exc.strerror or exc}",
            details={"path": exc.filename, "errno": exc.errno},
        )
        fail(".".join(key), failed, bool(flags.get("json")))
