"""The MCP server's tools: one row per tool, naming the CLI command it runs and which step of it.

A tool is a command of the Click tree run with ``--json``: its input schema is read off that command's own
parameters (one declaration: a flag added to the command is a tool argument too), its arguments become the
command's argv, and its result is the envelope the command prints. A two-step command is two tools: the
preview (the command as given) and the confirm (the same arguments plus ``preview_hash``, sent as
``--confirm --preview-hash``), so an agent reviews a plan before launching it exactly as a person does.

Pure: building the schemas and the argv imports Click, never the MCP SDK (``mcp_server.py`` serves them).
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from mlx_agent.errors import InvalidArguments

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

ONCE, PREVIEW, CONFIRM = "once", "preview", "confirm"
# The command's own flags, which the step sets: never tool arguments.
STEP_FLAGS = frozenset({"json", "confirm", "preview_hash", "help"})
PREVIEW_HASH = "preview_hash"  # the confirm tool's own argument, sent as --preview-hash
STEP_NOTES = {
    ONCE: "",
    PREVIEW: (
        " Preview only: returns data.plan with its preview_hash and changes nothing. To act on it, call the "
        "matching _confirm tool with the same arguments and that preview_hash."
    ),
    CONFIRM: (
        " Acts on a reviewed plan: give the same arguments as the preview plus its preview_hash; the plan is "
        "rebuilt and refused (preview_stale and its kin) if anything changed since the preview."
    ),
}


@dataclass(frozen=True)
class Tool:
    """One MCP tool: the CLI command it runs (its words), the step of it, and what it leaves out."""

    name: str
    command: tuple[str, ...]
    step: str = ONCE
    operation: str | None = None  # the envelope's operation, where it is not the command's words joined by dots
    leave_out: tuple[str, ...] = ()  # parameters an agent cannot use over MCP (say, one that streams forever)
    argument_help: tuple[tuple[str, str], ...] = ()  # (name, help) of positional arguments: Click gives them none
    looks_only: bool = False  # it changes nothing (a preview never does): MCP's readOnlyHint

    @property
    def read_only(self) -> bool:
        """Return whether the tool changes nothing a user sees: a preview, or a command that only reads."""
        return self.looks_only or self.step == PREVIEW

    @property
    def envelope_operation(self) -> str:
        """Return the ``operation`` of the envelope this tool's command prints."""
        return self.operation or ".".join(self.command)


WIRED_AGENT = (("agent", "The agent whose own config file is edited: claude, codex or opencode."),)
PULLED_REPO = (("repo", "The Hugging Face repo to fetch, ORG/NAME."),)
# Adding a command is one row (or two: its preview, then its confirm).
TOOLS: tuple[Tool, ...] = (
    Tool("models", ("models",), looks_only=True),
    Tool("serve_preview", ("serve", "start"), PREVIEW),
    Tool("serve_confirm", ("serve", "start"), CONFIRM),
    Tool("status", ("serve", "status"), looks_only=True),
    Tool("stop", ("serve", "stop")),
    Tool("unload", ("serve", "unload")),
    Tool("logs", ("serve", "logs"), leave_out=("follow",), looks_only=True),
    Tool("wire_preview", ("wire", "agent"), PREVIEW, operation="wire", argument_help=WIRED_AGENT),
    Tool("wire_confirm", ("wire", "agent"), CONFIRM, operation="wire", argument_help=WIRED_AGENT),
    Tool("pull_preview", ("pull",), PREVIEW, argument_help=PULLED_REPO),
    Tool("pull_confirm", ("pull",), CONFIRM, argument_help=PULLED_REPO),
)
BY_NAME = {tool.name: tool for tool in TOOLS}


def command_of(tool: Tool, root: click.Command) -> click.Command:
    """Return the Click command ``tool`` runs in the tree ``root`` (``cli/app.py``'s, handed in by the server)."""
    command: click.Command = root
    for word in tool.command:
        assert isinstance(command, click.Group), f"{tool.name}: {word} is below a command, not a group"
        found = command.commands.get(word)
        assert found is not None, f"{tool.name}: no command {' '.join(tool.command)}"
        command = found
    return command


def argument_name(param: click.Parameter) -> str:
    """Return the tool argument a parameter is: its long flag as a name, or a positional argument's name.

    ``--served-model-name`` is ``served_model_name``, the field its record fills; ``--dir`` is ``dir`` (not
    Click's ``dirs``), so a tool argument is always the flag a person types.
    """
    if isinstance(param, click.Option):
        return max(param.opts, key=len).lstrip("-").replace("-", "_")
    return str(param.name)


def parameters(tool: Tool, root: click.Command) -> list[click.Parameter]:
    """Return the command's parameters that are the tool's arguments, in the command's order."""
    left_out = STEP_FLAGS | set(tool.leave_out)
    return [p for p in command_of(tool, root).params if p.name is not None and argument_name(p) not in left_out]


def _value_schema(param: click.Parameter) -> dict[str, Any]:
    kind = param.type
    if isinstance(param, click.Option) and param.is_flag:
        return {"type": "boolean"}
    schema: dict[str, Any]
    if isinstance(kind, click.Choice):
        schema = {"type": "string", "enum": [str(c) for c in kind.choices]}
    elif isinstance(kind, click.types.IntParamType):
        schema = {"type": "integer"}
    elif isinstance(kind, click.types.FloatParamType):
        schema = {"type": "number"}
    else:
        schema = {"type": "string"}
    if isinstance(kind, click.types._NumberRangeBase):
        if kind.min is not None:
            schema["exclusiveMinimum" if kind.min_open else "minimum"] = kind.min
        if kind.max is not None:
            schema["exclusiveMaximum" if kind.max_open else "maximum"] = kind.max
    return schema


def _schema(param: click.Parameter, argument_help: Mapping[str, str]) -> dict[str, Any]:
    value = _value_schema(param)
    schema: dict[str, Any] = {"type": "array", "items": value} if param.multiple else value
    help_text = getattr(param, "help", None) or argument_help.get(argument_name(param))
    if help_text:
        schema["description"] = help_text
    default = param.default  # Click's own sentinel where none was declared: not a JSON value
    if isinstance(default, str | int | float) and not (isinstance(default, bool) and not default):
        schema["default"] = default
    return schema


def input_schema(tool: Tool, root: click.Command) -> dict[str, Any]:
    """Return the JSON Schema of the tool's arguments: the command's parameters by name (plus ``preview_hash``)."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for param in parameters(tool, root):
        props[argument_name(param)] = _schema(param, dict(tool.argument_help))
        if param.required:
            required.append(argument_name(param))
    if tool.step == CONFIRM:
        props[PREVIEW_HASH] = {"type": "string", "description": "The preview_hash the matching preview returned."}
        required.append(PREVIEW_HASH)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def description(tool: Tool, root: click.Command) -> str:
    """Return what the tool does: the command's own help line, then what its step means."""
    summary = command_of(tool, root).get_short_help_str(limit=300)
    return f"`mlx-agent {' '.join(tool.command)} --json`: {summary}{STEP_NOTES[tool.step]}"


def _fits(schema: Mapping[str, Any], value: Any) -> bool:
    wanted = schema["type"]
    if wanted == "array":
        return isinstance(value, list) and all(_fits(schema["items"], item) for item in value)
    if wanted == "boolean":
        return isinstance(value, bool)
    if wanted == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if wanted == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, str)


def argv(tool: Tool, arguments: Mapping[str, Any] | None, root: click.Command) -> list[str]:
    """Return the command line (after the program) that runs ``tool`` with ``arguments``, under ``--json``.

    An argument the tool does not have, or one of the wrong JSON type, is refused (``invalid_arguments``);
    bounds, choices and required options are left to the command, which refuses them as it does on a terminal.
    Options go as ``--flag=value`` (a value starting with a dash stays a value), arguments after ``--``.
    """
    given = dict(arguments or {})
    schema = input_schema(tool, root)
    props: dict[str, Any] = schema["properties"]
    unknown = sorted(set(given) - set(props))
    if unknown:
        raise InvalidArguments(
            f"{tool.name} has no argument {', '.join(unknown)}",
            details={"unknown": unknown, "arguments": sorted(props)},
        )
    for name, value in given.items():
        if value is not None and not _fits(props[name], value):
            raise InvalidArguments(
                f"{tool.name}: {name} must be of JSON type {props[name]['type']}",
                details={"argument": name, "expected": props[name]["type"]},
            )
        if "\x00" in str(value):  # no command line can carry it
            raise InvalidArguments(f"{tool.name}: {name} holds a NUL character", details={"argument": name})
    options: list[str] = []
    positional: list[str] = []
    for param in parameters(tool, root):
        value = given.get(argument_name(param))
        if value is None or value is False:
            continue
        if isinstance(param, click.Argument):
            positional.extend(str(v) for v in (value if param.multiple else [value]))
            continue
        flag = max(param.opts, key=len)  # the long spelling
        if value is True:
            options.append(flag)
        else:
            options.extend(f"{flag}={v}" for v in (value if param.multiple else [value]))
    step: list[str] = []
    if tool.step == CONFIRM:  # without a hash the command itself refuses: preview_hash_required
        step = ["--confirm"] + ([f"--preview-hash={given[PREVIEW_HASH]}"] if given.get(PREVIEW_HASH) else [])
    return [*tool.command, *options, *step, "--json", *(["--", *positional] if positional else [])]
