"""``mlx-agent mcp``: a stdio MCP server whose tools are the CLI's ``--json`` commands (``mcp_tools.TOOLS``).

Each call runs its command as a child, ``python -m mlx_agent ... --json`` (this interpreter, this environment,
this package), and returns what the child printed: the envelope is the CLI's by construction, its ``status``
decides ``isError``, and the child's exit status agrees with it. A child rather than a call in this process,
because a confirm is the CLI's whole confirm: it holds the port's lock, installs its signal handlers (main
thread only) and spawns a front that must outlive the call as it outlives ``serve start --confirm``; a
long-lived server would also keep whatever a module read once. The child's stdin is the null device and its
stdout a pipe of its own, so nothing it or its servers write can reach the MCP stream; while serving, the SDK
points this process's own fd 0 and 1 away from the stream too.

The SDK (``pip install 'mlx-agent[mcp]'``) is imported only here, when the command runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import click

from mlx_agent import __version__
from mlx_agent.cli.mcp_tools import BY_NAME, TOOLS, Tool, argv, description, input_schema
from mlx_agent.cli.output import envelope
from mlx_agent.errors import InvalidArguments, MlxAgentError
from mlx_agent.errors.commands import RuntimeNotInstalled
from mlx_agent.resources import checkout_root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import mcp_types

INSTRUCTIONS = (
    "Tools of mlx-agent, which plans, launches, supervises and stops local MLX model servers. Each returns the "
    "JSON envelope of the matching `mlx-agent ... --json` command (status, data, warnings, error with code and "
    "remediation). Mutating work is two steps: a *_preview tool returns a plan and its preview_hash and changes "
    "nothing; review it, then call the *_confirm tool with the same arguments and that preview_hash."
)
STDERR_KEPT = 4000  # the end of a child's stderr kept in an internal_error's details


def command_env(env: dict[str, str]) -> dict[str, str]:
    """Return the command's environment: this server's, with our package importable where it is a checkout."""
    root = checkout_root()
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _refused(tool: Tool, error: MlxAgentError) -> tuple[str, bool]:
    return json.dumps(envelope(tool.envelope_operation, None, [], error), indent=2), True


def run_tool(tool: Tool, arguments: dict[str, Any] | None, root: click.Command) -> tuple[str, bool]:
    """Run ``tool`` (a command of the tree ``root``) and return the envelope's text and whether it is an error."""
    try:
        args = argv(tool, arguments, root)
    except MlxAgentError as exc:
        return _refused(tool, exc)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mlx_agent", *args],
            env=command_env(dict(os.environ)),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            check=False,
        )
    except OSError as exc:  # no process to run the command in (out of memory, out of processes)
        return _refused(tool, MlxAgentError(f"could not start the command: {exc}", details={"errno": exc.errno}))
    if done.stderr:  # the command's own notes: the MCP client's log of this server
        sys.stderr.write(done.stderr)
        sys.stderr.flush()
    try:
        text, doc = last_document(done.stdout)
        failed = doc["status"] == "error"
    except (ValueError, TypeError, KeyError):
        text, doc, failed = "", None, True
    if doc is None or failed != (done.returncode != 0):
        return _refused(
            tool,
            MlxAgentError(
                f"`mlx-agent {' '.join(tool.command)}` printed no envelope matching its exit status {done.returncode}",
                details={"exit_code": done.returncode, "stderr": done.stderr[-STDERR_KEPT:]},
            ),
        )
    return text, failed


def last_document(stdout: str) -> tuple[str, Any]:
    """Return the text and value of the last JSON document on a command's stdout.

    A command prints its envelope last; one that reports progress under ``--json`` (``pull --confirm``) prints
    a line for each step before it, which an MCP call does not return (its result is the envelope alone).
    """
    decoder, at, last = json.JSONDecoder(), 0, None
    while at < len(stdout):
        if stdout[at].isspace():
            at += 1
            continue
        start = at
        value, at = decoder.raw_decode(stdout, at)
        last = (stdout[start:at], value)
    if last is None:
        raise ValueError("no JSON document")
    return last


def _server(root: click.Command) -> Any:
    import anyio.to_thread
    import mcp_types as types
    from mcp.server.lowlevel import Server

    listed = [
        types.Tool(
            name=t.name,
            description=description(t, root),
            input_schema=input_schema(t, root),
            annotations=types.ToolAnnotations(read_only_hint=t.read_only),
        )
        for t in TOOLS
    ]

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> mcp_types.CallToolResult:
        tool = BY_NAME.get(params.name)
        if tool is None:
            unknown = InvalidArguments(
                f"no tool {params.name}", details={"tool": params.name, "tools": [t.name for t in TOOLS]}
            )
            text, failed = json.dumps(envelope("mcp", None, [], unknown), indent=2), True
        else:
            text, failed = await anyio.to_thread.run_sync(run_tool, tool, params.arguments, root)
        return types.CallToolResult(
            content=[types.TextContent(text=text)], structured_content=json.loads(text), is_error=failed
        )

    return Server(
        "mlx-agent",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def serve_stdio(root: click.Command) -> None:
    """Serve the tools (commands of the tree ``root``) over stdin and stdout until the client closes stdin."""
    try:
        import anyio
        from mcp.server.stdio import stdio_server
    except ImportError as exc:
        raise RuntimeNotInstalled(
            f"`mlx-agent mcp` needs the MCP SDK, which is not installed here ({exc})",
            details={"install_command": "pip install 'mlx-agent[mcp]'", "missing": exc.name},
            remediation="Install the MCP extra into mlx-agent's environment: pip install 'mlx-agent[mcp]'.",
        ) from None
    server = _server(root)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


@click.command("mcp")
def mcp() -> None:
    """Serve mlx-agent's commands as MCP tools on stdin/stdout (for agents: models, serve, status, stop, ...).

    Each tool returns the envelope of its `--json` command; a plan is previewed, then confirmed by its hash.
    Add it to an agent as a stdio server whose command is `mlx-agent mcp` (docs/mcp.md).
    """
    from mlx_agent.cli.output import fail

    # The tree this command is part of, from Click's context: the tools are its other commands (importing
    # cli/app.py here would make an import circle, since it registers this command).
    root = click.get_current_context().find_root().command
    try:
        serve_stdio(root)
    except MlxAgentError as exc:
        fail("mcp", exc, as_json=False)  # stdout is the MCP stream: the refusal goes to stderr
