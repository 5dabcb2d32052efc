"""What each command does once its options are parsed, shared by the Click CLI and the fast path."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from mlx_agent.cli.lora_actions import LORA_ACTIONS
from mlx_agent.cli.output import run
from mlx_agent.home import receipts_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from mlx_agent.cli.output import Result
    from mlx_agent.supervise.readiness import Tick


def _render(name: str) -> Any:
    def render(data: dict[str, Any], warnings: list[str]) -> None:
        from mlx_agent.cli import render as r

        getattr(r, name)(data, warnings)

    return render


def _serve_dir(opts: dict[str, Any]) -> Path:
    return receipts_dir("serve", opts.get("receipts_dir"))


def serve_start(opts: dict[str, Any]) -> None:
    """Preview a server plan, or launch it with --confirm."""
    from mlx_agent.plan.serve_plan import ServeRequest

    as_json = bool(opts["as_json"])
    fields = ("path", "repo", "runtime", "port", "max_tokens", "ready_timeout", "runtime_executable", "thinking",
              "chat_template_args", "unit_dir", "restart", "receipts_dir", "adapter_path", "jit", "idle_timeout",
              "keep_loaded", "min_headroom_gb", "api_key_file", "training_receipt", "prompt_lookup", "m5_prefill")
    # Both flags give "launchd,systemd", which the plan refuses as invalid_arguments.
    supervisor = ",".join(k for k in ("launchd", "systemd") if opts[k]) or "mlx-agent"
    req = ServeRequest(supervisor=supervisor, **{k: opts[k] for k in fields})
    directory = _serve_dir(opts)

    def preview() -> Result:
        from mlx_agent.supervise.serve import preview as build_preview

        plan, warnings = build_preview(req, directory)
        return {"plan": plan, "requires_confirmation": True}, warnings

    def confirm() -> Result:
        from mlx_agent.supervise.serve import confirm as launch

        spin: AbstractContextManager[Tick | None] = nullcontext(None)
        if not as_json:
            from mlx_agent.cli.render import spinner

            spin = spinner("loading the model")
        with spin as tick:
            receipt, warnings = launch(req, opts["preview_hash"], directory, tick)
        path = str(directory / f"{receipt['port']}.json")
        return {"receipt": receipt, "receipt_path": path, "requires_confirmation": False}, warnings

    if opts["confirm"]:
        run("serve.start", as_json, confirm, _render("render_receipt"))
    else:
        run("serve.start", as_json, preview, _render("render_preview"))


def serve_status(opts: dict[str, Any]) -> None:
    """Show each server with a receipt, checked against the live process."""
    from mlx_agent.home import wired_dir
    from mlx_agent.plan.wired import loopback_claims, read_wired
    from mlx_agent.supervise.servers import status

    directory = _serve_dir(opts)

    def action() -> Result:
        configs, warnings = read_wired(wired_dir())
        claims = [c for c in loopback_claims(configs) if opts["port"] in (None, c["port"])]
        return {"receipts_dir": str(directory), "servers": status(directory, opts["port"], verify=opts["verify"]),
                "claims": claims}, warnings

    run("serve.status", bool(opts["as_json"]), action, _render("render_status"))


def serve_stop(opts: dict[str, Any]) -> None:
    """Stop the server on a port, only if the live process is the one its receipt started."""
    from mlx_agent.supervise.servers import stop

    directory = _serve_dir(opts)
    run("serve.stop", bool(opts["as_json"]), lambda: stop(directory, opts["port"], uninstall=opts["uninstall"]),
        _render("render_stop"))


def serve_unload(opts: dict[str, Any]) -> None:
    """Release a JIT gateway's model worker; the gateway stays up and loads again on the next request."""
    from mlx_agent.supervise.jit import unload

    directory = _serve_dir(opts)
    run("serve.unload", bool(opts["as_json"]), lambda: (unload(directory, opts["port"], opts["expected_pid"]), []),
        _render("render_control"))


def serve_policy(opts: dict[str, Any]) -> None:
    """Replace the whole idle and memory policy of a live JIT gateway."""
    from mlx_agent.plan.jit import policy
    from mlx_agent.supervise.jit import replace_policy

    directory = _serve_dir(opts)

    def action() -> Result:
        new = policy(opts["idle_timeout"], opts["keep_loaded"], opts["min_headroom_gb"])
        return replace_policy(directory, opts["port"], opts["expected_pid"], new), []

    run("serve.policy", bool(opts["as_json"]), action, _render("render_control"))


ACTIONS = {("serve", "start"): serve_start, ("serve", "status"): serve_status, ("serve", "stop"): serve_stop,
           ("serve", "unload"): serve_unload, ("serve", "policy"): serve_policy, **LORA_ACTIONS}
