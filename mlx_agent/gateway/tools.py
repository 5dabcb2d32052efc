"""Tools as clients declare them, turned into the function tools a local model sees, and its calls mapped back.

Both translated APIs use this:

* Function tools (and Anthropic's custom tools) become chat function tools; ``strict`` is accepted (the
  arguments' schema is passed to the model's template, not enforced while generating).
* OpenAI ``namespace`` tools are flattened: each of their functions is shown as ``NAMESPACE__NAME``, and a
  call to it is reported back under its own name with its ``namespace``.
* OpenAI ``custom`` (free-form) tools are shown as a function taking one string, ``input``, and a call comes
  back as a ``custom_tool_call`` with that input.
* Tools a provider runs on its own servers (web search, file search, code execution, MCP connectors, image
  generation, computer use) cannot run on this machine: they are left out of what the model sees, and the
  reply says which in the ``x-mlx-agent-dropped-tools`` header (and the front's log), so nothing pretends to
  have searched the web. So is OpenAI's ``tool_search`` (deferred-tool discovery), even client-executed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlx_agent.api_errors import Code
from mlx_agent.gateway.door.http_errors import refused

DROPPED_HEADER = "x-mlx-agent-dropped-tools"
NAMESPACE_JOIN = "__"
# OpenAI Responses tools that run on the provider's servers.
HOSTED_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_2025_08_26",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "computer_use",
        "mcp",
    }
)
# OpenAI's tool discovery (Codex sends it with catalogued models, ``execution: "client"``): it loads deferred
# tools into the conversation through its own output items, which a chat template cannot show the model, so it is
# left out like a hosted tool; the tools sent in full stay offered.
TOOL_SEARCH = "tool_search"
# Anthropic server tools, by the prefix of their versioned type (web_search_20250305, ...).
SERVER_TOOL_PREFIXES = ("web_search_", "web_fetch_", "code_execution_", "tool_search_tool_", "mcp_toolset")
# Anthropic's client tools with a fixed schema: the model is given that schema; the client runs them.
BASH_SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}, "restart": {"type": "boolean"}}}
EDITOR_SCHEMA = {
    "type": "object",
    "required": ["command", "path"],
    "properties": {
        "command": {"enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
        "path": {"type": "string"},
        "file_text": {"type": "string"},
        "old_str": {"type": "string"},
        "new_str": {"type": "string"},
        "insert_line": {"type": "integer"},
        "view_range": {"type": "array", "items": {"type": "integer"}},
    },
}
FIXED_CLIENT_TOOLS = {
    "bash_": ("bash", BASH_SCHEMA, "Run a shell command."),
    "text_editor_": ("str_replace_based_edit_tool", EDITOR_SCHEMA, "View and edit text files."),
}
CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


@dataclass(frozen=True)
class ClientTool:
    """How a tool the model sees is named to the client: its kind, its own name and its namespace."""

    kind: str  # "function" or "custom"
    name: str
    namespace: str | None = None


@dataclass
class ToolSet:
    """The function tools the model sees, how each maps back to the client's tool, and what was dropped."""

    functions: list[dict[str, Any]] = field(default_factory=list)
    clients: dict[str, ClientTool] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)

    def add(self, visible: str, description: object, parameters: object, client: ClientTool, where: str) -> None:
        """Add one function the model sees under ``visible``."""
        if visible in self.clients:
            raise refused(Code.INVALID_VALUE, f"two tools are named {visible!r}", param=f"{where}.name")
        function: dict[str, Any] = {"name": visible}
        if isinstance(description, str):
            function["description"] = description
        function["parameters"] = (
            dict(parameters) if isinstance(parameters, Mapping) else {"type": "object", "properties": {}}
        )
        self.functions.append({"type": "function", "function": function})
        self.clients[visible] = client

    def client(self, visible: str) -> ClientTool:
        """Return the client's tool a model's call names (a name the model made up is kept as a function)."""
        return self.clients.get(visible) or ClientTool("function", visible)

    def visible(self, name: str, namespace: object = None) -> str:
        """Return the name the model knows a client's tool by (for calls in the history)."""
        return f"{namespace}{NAMESPACE_JOIN}{name}" if isinstance(namespace, str) and namespace else name


def _name(tool: Mapping[str, Any], where: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise refused(Code.INVALID_VALUE, "a tool needs a name", param=f"{where}.name")
    return name


def _each_tool(tools: list[dict[str, Any]] | None) -> list[tuple[str, dict[str, Any]]]:
    """Return a request's tools (a list of objects: its declaration says so) with the path of each."""
    return [(f"tools.{index}", tool) for index, tool in enumerate(tools or [])]


def anthropic_tools(tools: list[dict[str, Any]] | None) -> ToolSet:
    """Return the tool set of an Anthropic Messages request's ``tools``."""
    found = ToolSet()
    for where, tool in _each_tool(tools):
        kind = tool.get("type")
        if kind in (None, "custom"):
            schema = tool.get("input_schema")
            if not isinstance(schema, Mapping):
                raise refused(Code.INVALID_VALUE, "a tool needs an input_schema object", param=f"{where}.input_schema")
            name = _name(tool, where)
            found.add(name, tool.get("description"), schema, ClientTool("function", name), where)
        elif isinstance(kind, str) and kind.startswith(SERVER_TOOL_PREFIXES):
            found.dropped.append(str(tool.get("name") or kind))
        elif isinstance(kind, str) and (
            fixed := next((v for k, v in FIXED_CLIENT_TOOLS.items() if kind.startswith(k)), None)
        ):
            name = str(tool.get("name") or fixed[0])
            found.add(name, fixed[2], fixed[1], ClientTool("function", name), where)
        else:
            raise refused(
                Code.UNSUPPORTED_TOOL,
                f"tool type {kind!r} is not supported: it needs what a local text model does not have "
                "(such as screenshots)",
                param=f"{where}.type",
            )
    return found


def responses_tools(tools: list[dict[str, Any]] | None) -> ToolSet:
    """Return the tool set of an OpenAI Responses request's ``tools``."""
    found = ToolSet()
    for where, tool in _each_tool(tools):
        _responses_tool(tool, where, found, None)
    return found


def _responses_tool(tool: Mapping[str, Any], where: str, found: ToolSet, namespace: str | None) -> None:
    kind = tool.get("type")
    if kind == "function":
        name = _name(tool, where)
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise refused(
                Code.INVALID_TYPE, "a function tool's parameters must be an object", param=f"{where}.parameters"
            )
        found.add(
            found.visible(name, namespace),
            tool.get("description"),
            parameters,
            ClientTool("function", name, namespace),
            where,
        )
    elif kind == "custom":
        name = _name(tool, where)
        found.add(
            found.visible(name, namespace),
            tool.get("description"),
            CUSTOM_INPUT,
            ClientTool("custom", name, namespace),
            where,
        )
    elif kind == "namespace" and namespace is None:
        space = _name(tool, where)
        inner = tool.get("tools")
        if not isinstance(inner, list):
            raise refused(Code.INVALID_TYPE, "a namespace tool needs a list of tools", param=f"{where}.tools")
        for index, item in enumerate(inner):
            if not isinstance(item, Mapping):
                raise refused(Code.INVALID_TYPE, "each tool must be an object", param=f"{where}.tools.{index}")
            _responses_tool(item, f"{where}.tools.{index}", found, space)
    elif kind in HOSTED_TOOLS or kind == TOOL_SEARCH:
        found.dropped.append(str(kind))
    else:
        raise refused(Code.UNSUPPORTED_TOOL, f"tool type {kind!r} is not supported here", param=f"{where}.type")
