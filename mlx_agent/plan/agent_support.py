"""What a served model can do for an agent, recorded in its plan, and the warnings that say when it cannot.

Per chat model the plan's ``agents`` record holds:

* ``chat_template``: the template the worker renders with tools, where it comes from and how it is bound. A
  checkpoint's template is a file the source record already binds (``chat_template.jinja``, a named template
  under ``additional_chat_templates/``, or ``tokenizer_config.json``'s ``chat_template``): the record names that
  file and repeats its identity, it is not bound twice. ``--chat-template FILE`` is bound here, by sha256 and
  size, and every load rechecks it (the plan's ``file_checks``, and the worker's own check as it reads it).
* ``renders_tools``, ``thinking``, ``render_error``: decided by rendering the template in jinja's sandbox
  (``template_render``).
* ``tool_parser`` and ``tool_parser_from``: the parser that reads the model's calls, as the worker will choose
  it: ``--tool-parser`` (``option``), else the checkpoint's ``tool_parser_type`` (``checkpoint``), else the
  template's markers (``template``: mlx_lm's rules, then ours, ``tool_formats``; Harmony for gpt-oss's). A
  runtime other than the wrapped mlx_lm chooses by itself (``runtime``: mlx-vlm reads its own markers), which the
  plan does not predict.
* ``context_window``: the model's, as the plan's ``context_window``.

Pure: reads the files the source names, never writes; jinja2 is imported only to render.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlx_agent.errors import InvalidArguments
from mlx_agent.errors.commands import UnsupportedRuntime
from mlx_agent.files import sha256_file
from mlx_agent.tool_formats import OUR_PARSERS, parser_for

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal

    from mlx_agent.plan.requests import ModelRequest
    from mlx_agent.records.plan import AgentsRecord, ChatTemplateRecord, FileCheck, ModelPlan, Recipe, RuntimeRecord

# Where transformers finds a checkpoint's template, first match wins (a processor also reads chat_template.json).
TEMPLATE_FILE = "chat_template.jinja"
TEMPLATE_DIR = "additional_chat_templates"
PROCESSOR_TEMPLATE_FILE = "chat_template.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# What transformers renders with tools when a checkpoint has several named templates.
TOOL_TEMPLATE, DEFAULT_TEMPLATE = "tool_use", "default"
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")
# gpt-oss writes its calls in Harmony, which the wrapped worker reads for a tokenizer with these tokens
# (runtime/reply/harmony.py's REQUIRED_TOKENS; a test holds the two equal).
HARMONY_TOKENS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>")
HARMONY = "harmony"
PARSER_DIR = "mlx_lm/tool_parsers/"  # the runtime's parser modules, among the sources the plan binds

# The warnings' wording is stable: agents and tests read it. "{name}: " comes first.
NO_TEMPLATE = "no chat template: chat requests, and so every agent, will fail; give one with --chat-template FILE"
CANNOT_RENDER = (
    "the chat template cannot render {error}: an agent's requests will fail; "
    "give a template that renders it with --chat-template FILE"
)
NO_TOOLS = (
    "the chat template does not render `tools`: the model never sees an agent's tools; "
    "give one that does with --chat-template FILE"
)
NO_PARSER = (
    "no tool-call parser for this template: tool calls will arrive as text; "
    "name one with --tool-parser NAME, or give a template with --chat-template FILE"
)


class Template:
    """A chat template's text (the one rendered with tools) and where it comes from."""

    __slots__ = ("named", "record", "text")

    def __init__(self, text: str, record: ChatTemplateRecord, *, named: bool = False) -> None:
        self.text = text
        self.record = record
        self.named = named  # one of several named templates: mlx_lm picks no parser from those (it reads a string)


def _json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _identity(source: dict[str, Any], name: str) -> dict[str, Any]:
    """Return the source's own record of a file (how the plan already binds it)."""
    for record in source["files"]:
        if record["name"] == name:
            return {k: record[k] for k in ("sha256", "blob", "size") if k in record}
    return {}


def _checkpoint(source: dict[str, Any], name: str, template: str, *, named: str | None = None) -> Template:
    path = str(Path(source["path"]) / name)
    record: ChatTemplateRecord = {"source": "checkpoint", "path": path, "name": named, **_identity(source, name)}  # type: ignore[typeddict-item]
    return Template(template, record, named=named is not None)


def _pick(templates: dict[str, str]) -> str | None:
    """Return the name of the template transformers renders with tools among named ones."""
    for name in (TOOL_TEMPLATE, DEFAULT_TEMPLATE):
        if name in templates:
            return name
    return None


def checkpoint_template(source: dict[str, Any]) -> Template | None:
    """Return the template the checkpoint gives the worker with tools, as transformers finds it, or None."""
    root = Path(source["path"])
    names = {record["name"] for record in source["files"]}
    extra = sorted(n for n in names if n.startswith(f"{TEMPLATE_DIR}/") and n.endswith(".jinja"))
    if TEMPLATE_FILE in names or extra:
        files = {Path(n).stem: n for n in extra}
        if TEMPLATE_FILE in names:
            files[DEFAULT_TEMPLATE] = TEMPLATE_FILE
        chosen = _pick(files) if len(files) > 1 else next(iter(files))
        if chosen is not None:
            text = (root / files[chosen]).read_text(encoding="utf-8", errors="replace")
            return _checkpoint(source, files[chosen], text, named=chosen if len(files) > 1 else None)
    if PROCESSOR_TEMPLATE_FILE in names:
        text = _json(root / PROCESSOR_TEMPLATE_FILE).get("chat_template")
        if isinstance(text, str) and text:
            return _checkpoint(source, PROCESSOR_TEMPLATE_FILE, text)
    if TOKENIZER_CONFIG not in names:
        return None
    value = _json(root / TOKENIZER_CONFIG).get("chat_template")
    if isinstance(value, str) and value:
        return _checkpoint(source, TOKENIZER_CONFIG, value)
    if isinstance(value, list):  # [{"name": ..., "template": ...}]: what transformers reads as a dict
        named = {t["name"]: t["template"] for t in value if isinstance(t, dict) and isinstance(t.get("template"), str)}
        chosen = _pick(named)
        if chosen is not None:
            return _checkpoint(source, TOKENIZER_CONFIG, named[chosen], named=chosen)
    return None


def template_file(raw: str) -> Template:
    """Return ``--chat-template FILE``: an absolute, readable UTF-8 jinja file, bound by sha256 and size."""
    from mlx_agent.plan.template_render import SyntaxProblem, compile_template

    path = Path(raw)
    if not path.is_absolute():
        raise InvalidArguments(
            f"--chat-template {raw} is not an absolute path", details={"option": "--chat-template", "path": raw}
        )
    resolved = path.resolve()
    if not resolved.is_file():
        raise InvalidArguments(
            f"--chat-template {raw} is not a file", details={"option": "--chat-template", "path": raw}
        )
    try:
        text = resolved.read_bytes().decode("utf-8")
        compile_template(text)
    except (OSError, UnicodeDecodeError, SyntaxProblem) as error:
        raise InvalidArguments(
            f"--chat-template {raw} is not a readable jinja template: {error}",
            details={"option": "--chat-template", "path": str(resolved)},
        ) from error
    record: ChatTemplateRecord = {
        "source": "file",
        "path": str(resolved),
        "name": None,
        "sha256": sha256_file(resolved),
        "size": resolved.stat().st_size,
    }
    return Template(text, record)


def installed_parsers(runtime: RuntimeRecord) -> list[str]:
    """Return the parsers a wrapped mlx_lm worker can be given: mlx_lm's modules (read, not imported), and ours."""
    theirs = [
        name.removeprefix(PARSER_DIR).removesuffix(".py")
        for name in (runtime.get("runtime_sources") or {})
        if name.startswith(PARSER_DIR) and name.count("/") == 2 and not name.endswith("/__init__.py")
    ]
    return sorted({*theirs, *OUR_PARSERS})


def template_parser(template: Template) -> str | None:
    """Return the parser the wrapped worker picks from a template's text (a checkpoint's named ones: none)."""
    if template.named:
        return None
    if all(token in template.text for token in HARMONY_TOKENS):
        return HARMONY
    return parser_for(template.text)


def check_options(spec: ModelRequest, recipe: Recipe, runtime: RuntimeRecord) -> None:
    """Refuse --chat-template and --tool-parser for a runtime that cannot take them, and an unknown parser."""
    given = (("--chat-template", spec.chat_template), ("--tool-parser", spec.tool_parser))
    asked = [flag for flag, value in given if value is not None]
    capabilities = recipe.get("capabilities", {})
    for flag in asked:
        if not capabilities.get(flag.removeprefix("--").replace("-", "_")):
            raise UnsupportedRuntime(
                f"runtime {recipe['name']} takes no {flag}", details={"runtime": recipe["name"], "option": flag}
            )
    if asked and runtime["launcher"] != "wrapped":
        raise UnsupportedRuntime(
            f"{' and '.join(asked)} reach the worker only through mlx-agent's own entry, which rechecks them before "
            "loading; a --runtime-executable from another environment cannot",
            details={"runtime": recipe["name"], "launcher": runtime["launcher"], "options": asked},
        )
    if spec.tool_parser is not None:
        installed = installed_parsers(runtime)
        if spec.tool_parser not in installed:
            raise InvalidArguments(
                f"--tool-parser {spec.tool_parser} is not an installed parser; installed: {', '.join(installed)}",
                details={"option": "--tool-parser", "tool_parser": spec.tool_parser, "installed": installed},
            )


def special_tokens(source: dict[str, Any]) -> dict[str, str]:
    """Return the special tokens transformers gives a template as variables (tokenizer_config.json's)."""
    config = _json(Path(source["path"]) / TOKENIZER_CONFIG)
    tokens: dict[str, str] = {}
    for key in SPECIAL_TOKENS:
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            tokens[key] = value
    return tokens


def agents_record(
    spec: ModelRequest,
    source: dict[str, Any],
    runtime: RuntimeRecord,
    *,
    predicts_parser: bool,
    window: int | None,
) -> tuple[AgentsRecord, Template | None]:
    """Return the model's ``agents`` record (module docstring) and the template it describes."""
    from mlx_agent.plan.template_render import probe

    template = template_file(spec.chat_template) if spec.chat_template else checkpoint_template(source)
    if template is None:
        renders_tools, thinking, error = False, False, None
    else:
        renders_tools, thinking, error = probe(template.text, special_tokens(source))
    configured = _json(Path(source["path"]) / TOKENIZER_CONFIG).get("tool_parser_type")
    parser: str | None
    origin: Literal["option", "checkpoint", "template", "runtime"]
    if spec.tool_parser is not None:
        parser, origin = spec.tool_parser, "option"
    elif not predicts_parser:
        parser, origin = None, "runtime"
    elif isinstance(configured, str) and configured:
        parser, origin = configured, "checkpoint"
    else:
        parser, origin = (template_parser(template) if template is not None else None), "template"
    record: AgentsRecord = {
        "chat_template": template.record if template is not None else None,
        "renders_tools": renders_tools,
        "render_error": error,
        "tool_parser": parser,
        "tool_parser_from": origin,
        "thinking": thinking,
        "context_window": window,
    }
    return record, template


def template_checks(template: Template | None) -> list[FileCheck]:
    """Return the check of a --chat-template file every load makes (a checkpoint's is bound with its source)."""
    if template is None or template.record["source"] != "file":
        return []
    record = template.record
    return [{"path": record["path"], "sha256": record["sha256"], "size": record["size"]}]


def agent_warnings(models: list[ModelPlan]) -> list[str]:
    """Return one plain warning per way each model will fail an agent, with its remedy (stable wording)."""
    warnings: list[str] = []
    for model in models:
        record = model.get("agents")
        if record is None:
            continue
        name = model["served_model_name"]
        if record["chat_template"] is None:
            warnings.append(f"{name}: {NO_TEMPLATE}")
            continue
        if record["render_error"] is not None:
            warnings.append(f"{name}: {CANNOT_RENDER.format(error=record['render_error'])}")
        if not record["renders_tools"]:
            warnings.append(f"{name}: {NO_TOOLS}")
        if record["tool_parser"] is None and record["tool_parser_from"] != "runtime":
            warnings.append(f"{name}: {NO_PARSER}")
    return warnings
