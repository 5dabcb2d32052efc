"""Tiny gpt-oss-like models for the Harmony tests (no tests here): Harmony's tokens, a Harmony template, a script.

Each model is ``wrapped_support.scripted_model``: its greedy next token depends only on the current one, so
after the generation prompt (``<|start|>assistant``, last token ``assistant``) it writes one fixed reply, one of
the forms gpt-oss writes (``FORMS``). A token can have one successor only, so a header that comes a second time
in a reply is one plain token spelling the whole header (the splitter reads text, so this is the same text a
real model writes in several tokens). ``<|return|>`` and ``<|call|>`` are the stop tokens, as in gpt-oss.

Bare mlx_lm.server (0.32.2) has no Harmony support: each reply below comes back as one ``content`` with the
channel markup inside, no ``reasoning`` and no ``tool_calls``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.e2e.wrapped_support import scripted_model

SPECIAL = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>"]
FINAL_HEADER = "<|start|>assistant<|channel|>final<|message|>"  # one plain token (see the module docstring)
PREAMBLE_HEADER = "<|start|>assistant<|channel|>commentary<|message|>"
CALL_HEADER = "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"

THOUGHT = "The user wants the weather in Paris."
ANSWER = "It is sunny in Paris."
PREAMBLE = "Let me look that up."
PARIS = '{"city": "Paris"}'
LYON = '{"city": "Lyon"}'
COMMAND = "ls -la /tmp"
HEDGE = "Hmm, wait."

# gpt-oss's template, cut down: a developer message naming the tools, past calls with the recipient in the role
# header (as gpt-oss renders them), tool results from functions.NAME, and the generation prompt.
HARMONY_TEMPLATE = (
    "{%- set ns = namespace(call='') -%}"
    "{%- if tools -%}<|start|>developer<|message|># Tools\n\nnamespace functions {\n"
    "{%- for tool in tools %}type {{ tool['function']['name'] }} = (_: any) => any;\n{% endfor -%}"
    "} // namespace functions<|end|>{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- set content = message['content'] if message['content'] is string else '' -%}"
    "{%- if message['role'] in ('system', 'developer') -%}<|start|>developer<|message|>{{ content }}<|end|>"
    "{%- elif message['role'] == 'user' -%}<|start|>user<|message|>{{ content }}<|end|>"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') -%}"
    "{%- for call in message['tool_calls'] -%}{%- set ns.call = call['function']['name'] -%}"
    "<|start|>assistant to=functions.{{ ns.call }}<|channel|>commentary json<|message|>"
    "{{ call['function']['arguments'] | tojson }}<|call|>"
    "{%- endfor -%}"
    "{%- elif message['role'] == 'assistant' -%}<|start|>assistant<|channel|>final<|message|>{{ content }}<|end|>"
    "{%- elif message['role'] == 'tool' -%}"
    "<|start|>functions.{{ ns.call }} to=assistant<|channel|>commentary<|message|>{{ content }}<|end|>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"
)

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
SHELL_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}
QUESTION: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
# A conversation after one tool round: the model called get_weather for Paris and got the result.
TOOL_ROUND: Any = [
    *QUESTION,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": PARIS}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 C. Also check Lyon."},
]


@dataclass(frozen=True)
class Form:
    """One reply gpt-oss writes: the script that writes it, the request that asks for it, and the split wanted."""

    chain: dict[str, str]
    messages: Any = field(default_factory=lambda: QUESTION)
    tools: Any = field(default_factory=lambda: [WEATHER_TOOL])
    reasoning: str = ""
    content: str = ""
    calls: tuple[tuple[str, Any], ...] = ()  # (name, arguments) of each call

    @property
    def finish_reason(self) -> str:
        """Return the finish reason the reply ends with."""
        return "tool_calls" if self.calls else "stop"


FORMS = {
    # analysis, then final
    "thinks_then_answers": Form(
        {
            "assistant": "<|channel|>",
            "<|channel|>": "analysis",
            "analysis": "<|message|>",
            "<|message|>": THOUGHT,
            THOUGHT: "<|end|>",
            "<|end|>": FINAL_HEADER,
            FINAL_HEADER: ANSWER,
            ANSWER: "<|return|>",
        },
        tools=None,
        reasoning=THOUGHT,
        content=ANSWER,
    ),
    # thinking, a preamble on the commentary channel, then a call with the recipient in the channel header
    "preamble_then_call": Form(
        {
            "assistant": "<|channel|>",
            "<|channel|>": "analysis",
            "analysis": "<|message|>",
            "<|message|>": THOUGHT,
            THOUGHT: "<|end|>",
            "<|end|>": PREAMBLE_HEADER,
            PREAMBLE_HEADER: PREAMBLE,
            PREAMBLE: CALL_HEADER,
            CALL_HEADER: PARIS,
            PARIS: "<|call|>",
        },
        reasoning=THOUGHT,
        content=PREAMBLE,
        calls=(("get_weather", {"city": "Paris"}),),
    ),
    # after a tool round, the recipient in the role header
    "role_header_call": Form(
        {
            "assistant": " to=functions.get_weather",
            " to=functions.get_weather": "<|channel|>",
            "<|channel|>": "commentary",
            "commentary": " json",
            " json": "<|message|>",
            "<|message|>": LYON,
            LYON: "<|call|>",
        },
        messages=TOOL_ROUND,
        calls=(("get_weather", {"city": "Lyon"}),),
    ),
    # a call made from the analysis channel
    "analysis_call": Form(
        {
            "assistant": "<|channel|>",
            "<|channel|>": "analysis",
            "analysis": " to=functions.get_weather",
            " to=functions.get_weather": " code",
            " code": "<|message|>",
            "<|message|>": PARIS,
            PARIS: "<|call|>",
        },
        calls=(("get_weather", {"city": "Paris"}),),
    ),
    # arguments that are not JSON, handed over under "_raw"
    "raw_arguments": Form(
        {
            "assistant": "<|channel|>",
            "<|channel|>": "commentary",
            "commentary": " to=functions.shell ",
            " to=functions.shell ": "<|constrain|>",
            "<|constrain|>": "json",
            "json": "<|message|>",
            "<|message|>": COMMAND,
            COMMAND: "<|call|>",
        },
        messages=[{"role": "user", "content": "List /tmp."}],
        tools=[SHELL_TOOL],
        calls=(("shell", {"_raw": COMMAND}),),
    ),
}

# Thinks in a loop ("Hmm, wait." forever) until a limit closes its thinking; then it answers.
LOOPING_THINKER = {
    "assistant": "<|channel|>",
    "<|channel|>": "analysis",
    "analysis": "<|message|>",
    "<|message|>": HEDGE,
    HEDGE: HEDGE,
    "<|end|>": FINAL_HEADER,
    FINAL_HEADER: ANSWER,
    ANSWER: "<|return|>",
}


def harmony_model(directory: Path, chain: dict[str, str]) -> Path:
    """Build a tiny Harmony model writing ``chain`` after ``<|start|>assistant``; stop tokens as gpt-oss's."""
    plain = sorted({t for pair in chain.items() for t in pair if t not in SPECIAL} | {"assistant"})
    model = scripted_model(
        directory,
        chain,
        "<|return|>",
        special=SPECIAL,
        plain=plain,
        template=HARMONY_TEMPLATE,
        tokenizer_config={"eos_token": "<|return|>"},
    )
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    ids = {token["content"]: token["id"] for token in tokenizer["added_tokens"]}
    stops = [ids["<|return|>"], ids["<|call|>"]]
    for name in ("config.json", "generation_config.json"):
        config = json.loads((model / name).read_text())
        config["eos_token_id"] = stops
        (model / name).write_text(json.dumps(config, indent=2))
    return model
