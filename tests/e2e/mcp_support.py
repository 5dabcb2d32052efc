"""The MCP server driven by the official SDK's own stdio client (``mcp.client.stdio``), as an agent drives it."""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT, assert_valid


@dataclass
class Answer:
    """One tool call's result: the envelope (parsed from the text content) and whether it is an error."""

    doc: dict[str, Any]
    is_error: bool
    text: str

    @property
    def data(self) -> dict[str, Any]:
        """Return the envelope's data."""
        data: dict[str, Any] = self.doc["data"]
        return data

    @property
    def code(self) -> str | None:
        """Return the envelope's error code, if any."""
        error = self.doc.get("error")
        return None if error is None else str(error["code"])


class Tools:
    """A live client session with ``mlx-agent mcp``."""

    def __init__(self, session: Any) -> None:
        self.session = session

    async def call(self, name: str, **arguments: Any) -> Answer:
        """Call tool ``name``; check that its text is one envelope, the same as its structured content."""
        result = await self.session.call_tool(name, arguments)
        [content] = result.content
        doc = json.loads(content.text)
        assert_valid("envelope", doc)
        assert result.structured_content == doc
        assert result.is_error == (doc["status"] == "error"), doc
        return Answer(doc, result.is_error, content.text)


@contextlib.asynccontextmanager
async def mcp_tools(env: dict[str, str], cwd: Path, wire_log: Path | None = None) -> AsyncIterator[Tools]:
    """Start ``mlx-agent mcp`` from the checkout and open an initialised client session with it.

    With ``wire_log``, the server's stdout (the MCP stream) is also copied there by ``tee``, to read afterwards.
    """
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    launcher = [sys.executable, str(REPO_ROOT / "scripts" / "mlx-agent"), "mcp"]
    if wire_log is None:
        command, args = launcher[0], launcher[1:]
    else:
        command = "bash"
        args = ["-c", f"set -o pipefail; {shlex.join(launcher)} | tee {shlex.quote(str(wire_log))}"]
    params = StdioServerParameters(command=command, args=args, env=env, cwd=cwd)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield Tools(session)
