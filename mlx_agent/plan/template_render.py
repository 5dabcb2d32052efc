"""What a chat template can do for an agent, decided by rendering it as the worker will: in jinja's sandbox.

transformers renders a chat template in jinja's ``ImmutableSandboxedEnvironment`` (``trim_blocks``,
``lstrip_blocks``, the ``loopcontrols`` extension and a ``{% generation %}`` block), with its own ``tojson``,
``raise_exception``, ``strftime_now``, ``dict`` and ``namespace``, and the tokenizer's special tokens as
variables. The same setup is built here without importing transformers (seconds): the plan renders a template
three or four times, so what it reports is what the worker's renderer does, not what the template's text
mentions:

* ``renders_tools``: a user turn rendered with one probe tool (and the generation prompt) shows the tool's name;
* ``thinking``: the template thinks, or can be told to: its generation prompt opens ``<think>``, or
  ``enable_thinking`` changes what it renders, or an assistant turn's ``reasoning_content`` is rendered;
* ``error``: what the template cannot render, and why: a plain user turn (every request would fail), or a tool
  call and its result (every agent's second request would fail: the sandbox refuses Kimi K2's ``list.append``,
  Gemma's templates refuse the ``tool`` role).

jinja2 is imported only here, and only when a plan is built (the CLI's other commands never pay for it).
"""

from __future__ import annotations

import json
from datetime import datetime

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, NamedTuple
else:
    from typing import NamedTuple

PROBE_TOOL_NAME = "mlx_agent_probe_tool"
PROBE_THOUGHT = "mlx_agent_probe_thought"
PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": PROBE_TOOL_NAME,
        "description": "Read a file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "The file to read."}},
            "required": ["path"],
        },
    },
}
TRUSTED_JINJA = (3, 1, 6)
MESSAGE_CHARS = 300  # of an error's message, in the plan
USER = {"role": "user", "content": "Read README.md."}
# An assistant turn after the last user turn, so templates that drop earlier turns' reasoning still render it;
# transformers passes a message's reasoning as both reasoning_content and thinking (gpt-oss reads the latter).
THOUGHT = {"role": "assistant", "content": "Done.", "reasoning_content": PROBE_THOUGHT, "thinking": PROBE_THOUGHT}
# One call and its result, as an agent's second request carries them (an id of 9 alphanumerics, as Mistral's
# templates demand; arguments as an object, as mlx_lm hands them to the template).
CALL_ID = "a1b2c3d4e"
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": CALL_ID, "type": "function", "function": {"name": PROBE_TOOL_NAME, "arguments": {"path": "README.md"}}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": CALL_ID, "name": PROBE_TOOL_NAME, "content": "# README"}


class Probe(NamedTuple):
    """What rendering a template showed."""

    renders_tools: bool
    thinking: bool
    error: str | None  # what cannot be rendered, and the error


class SyntaxProblem(ValueError):
    """The template is not valid jinja."""


def _environment() -> Any:
    """Return a sandboxed environment set up as transformers sets up its chat template renderer."""
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: transformers marks assistant text with it; rendered as is."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller: Any) -> str:
            return str(caller())

    class Namespace(jinja2.utils.Namespace):
        """A namespace that refuses underscore names, as transformers' does."""

        def __setitem__(self, name: str, value: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a namespace cannot store {name!r}")
            super().__setitem__(name, value)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False
    ) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = Namespace
    return env


def compile_template(source: str) -> Any:
    """Return the compiled template; raise ``SyntaxProblem`` naming the line of a template that is not jinja.

    A checkpoint's template is someone else's code: as transformers does, no jinja2 older than ``TRUSTED_JINJA``
    (whose sandbox has known escapes) is given one.
    """
    import jinja2

    version = tuple(int(part) for part in jinja2.__version__.split(".")[:3] if part.isdigit())
    if version < TRUSTED_JINJA:
        raise SyntaxProblem(f"jinja2 {jinja2.__version__} is older than 3.1.6, whose sandbox is trusted: upgrade it")

    try:
        return _environment().from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as error:
        raise SyntaxProblem(f"TemplateSyntaxError: line {error.lineno}: {error.message}") from error


def _render(template: Any, tokens: Mapping[str, Any], messages: list[dict[str, Any]], **kwargs: Any) -> str | None:
    """Return the rendering, or None where the template raises (its own refusal, or the sandbox's)."""
    try:
        return str(template.render(messages=messages, **tokens, **kwargs))
    except Exception:  # a template raises whatever its code does: nothing here is evidence either way
        return None


def describe(error: Exception) -> str:
    """Return an error as the plan records it: its type and its message's first line, without object addresses.

    The plan is hashed: an address (``<function f at 0x7f...>``) would make every preview differ.
    """
    import re

    lines = str(error).strip().splitlines()
    message = re.sub(r" at 0x[0-9a-fA-F]+", "", lines[0])[:MESSAGE_CHARS] if lines else ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def probe(source: str, tokens: Mapping[str, Any]) -> Probe:
    """Render ``source`` with a probe tool and a probe thought (module docstring); ``tokens``: its special tokens."""
    try:
        template = compile_template(source)
    except SyntaxProblem as error:
        return Probe(False, False, f"any request ({error})")
    try:
        with_tools = str(template.render(messages=[USER], tools=[PROBE_TOOL], add_generation_prompt=True, **tokens))
    except Exception as error:  # what an agent's first request renders; a template raises whatever its code does
        plain = _render(template, tokens, [USER], add_generation_prompt=True)
        if plain is None:
            return Probe(False, False, f"a user turn ({describe(error)})")
        with_tools = plain
    prompt = _render(template, tokens, [USER], add_generation_prompt=True) or ""
    on = _render(template, tokens, [USER], add_generation_prompt=True, enable_thinking=True)
    off = _render(template, tokens, [USER], add_generation_prompt=True, enable_thinking=False)
    thought = _render(template, tokens, [USER, THOUGHT], add_generation_prompt=False) or ""
    thinking = (
        "<think>" in prompt.rsplit(USER["content"], 1)[-1]
        or (on is not None and off is not None and on != off)
        or PROBE_THOUGHT in thought
        or "<think>" in thought
    )
    failed = None
    try:
        template.render(messages=[USER, CALL, RESULT], tools=[PROBE_TOOL], add_generation_prompt=True, **tokens)
    except Exception as refused:
        failed = f"a tool call and its result ({describe(refused)})"
    return Probe(PROBE_TOOL_NAME in with_tools, thinking, failed)
