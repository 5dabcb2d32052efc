"""Each corpus family's tool calls as its models write them, read through the worker's own path (no tests here).

A family is a real template of the corpus (``tests/templates/``), the special tokens its checkpoint has (the
tool-call and thinking markers), and how its models write a call: the template's own rendering of a call,
written out here as a function (``Family.write``), plus the literal outputs of llama.cpp's ``tests/test-chat.cpp``
for that template (``Family.real``). Every family gets the same cases (``cases``): one call, parallel calls,
nested objects and arrays, strings with quotes, backslashes and unicode, strings with leading and trailing
newlines and whitespace, numbers, booleans and null, text before the call, a reasoning block before the call
(families that think), and a call cut by max_tokens.

``read`` runs a case as the worker does: mlx_lm's ``tokenizer_utils.load`` on a tokenizer carrying the family's
template and markers (so the parser is chosen by mlx_lm's selection, with ours installed by
``family_parsers.install``), the prompt rendered by that tokenizer (its last think marker decides the first
state, as mlx_lm's ``_tokenize`` does), the reply fed token by token through ``make_text_state_machine`` and
collected per state as mlx_lm's ``handle_completion`` loop does, then our ``KeepingToolCallFormatter``.
``family_rows()`` is the per-family table (calls parsed exactly / total) ``scripts/bench_families.py`` prints.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.template_corpus import template

Arguments = dict[str, Any]


@dataclass(frozen=True)
class Call:
    """A call the model means: the tool's name, its arguments, and the id it writes (if its format has one)."""

    name: str
    arguments: Arguments
    id: str | None = None


@dataclass(frozen=True)
class Case:
    """One reply of a model and the calls a client must get from it."""

    name: str
    text: str  # the reply as the model writes it, after the prompt
    calls: tuple[Call, ...]
    content: str = ""  # the reply's text outside reasoning and calls (what did not parse included), whitespace aside
    cut: bool = False  # ended by max_tokens: no call may come back, and the text must (the marker)


@dataclass(frozen=True)
class Family:
    """A family of the corpus: its template, its checkpoint's special tokens, and how its models write calls."""

    name: str
    template: str  # the corpus file stem
    specials: tuple[str, ...]
    write: Callable[[Sequence[Call]], str]
    thinks: bool = False  # its models write a reasoning block before answering
    real: tuple[Case, ...] = field(default=())  # llama.cpp's tests/test-chat.cpp, as written there


TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": properties},
        },
    }
    for name, properties in (
        ("get_time", {"city": {"type": "string"}}),
        ("get_weather", {"city": {"type": "string"}}),
        ("special_function", {"arg1": {"type": "integer"}}),
        ("special_function_with_opt", {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}}),
        ("plan", {"steps": {"type": "array"}, "options": {"type": "object"}}),
        ("say", {"text": {"type": "string"}}),
        (
            "Edit",
            {"file_path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
        ),
        (
            "configure",
            {
                "count": {"type": "integer"},
                "ratio": {"type": "number"},
                "big": {"type": "integer"},
                "on": {"type": "boolean"},
                "off": {"type": "boolean"},
                "none": {"type": ["string", "null"]},
            },
        ),
    )
]

ONE = (Call("get_time", {"city": "Tokyo"}),)
PARALLEL = (Call("get_time", {"city": "Paris"}), Call("get_weather", {"city": "Paris"}))
NESTED = (
    Call(
        "plan",
        {"steps": [{"path": "a.py", "lines": [1, 2]}, ["x", []]], "options": {"deep": {"list": [True, None]}}},
    ),
)
STRINGS = (Call("say", {"text": 'say "hi" \\ C:\\path\\n é 日本 🙂 <b>&amp;</b> {not: json}'}),)
WHITESPACE = (
    Call("Edit", {"file_path": "src/app.py", "old_string": "x = 1\n", "new_string": "\n  y = 2\n\n\tz = 3  "}),
)
SCALARS = (Call("configure", {"count": 3, "ratio": -0.5, "big": 12345678901, "on": True, "off": False, "none": None}),)
BEFORE = "Let me check the time there."
ANSWER = '{"name": "Ada Lovelace", "born": 1815}'  # JSON a user asked for, not a call
THOUGHT = "The user wants the time, so I call get_time."


def cases(family: Family) -> tuple[Case, ...]:
    """Return every case of ``family``: the shared ones written its way, then llama.cpp's literal ones."""
    write = family.write
    shared = [
        Case("one call", write(ONE), ONE),
        Case("parallel calls", write(PARALLEL), PARALLEL),
        Case("nested objects and arrays", write(NESTED), NESTED),
        Case("quotes, backslashes, unicode", write(STRINGS), STRINGS),
        Case("leading and trailing whitespace", write(WHITESPACE), WHITESPACE),
        Case("numbers, booleans, null", write(SCALARS), SCALARS),
        Case("text before the call", BEFORE + "\n\n" + write(ONE), ONE, content=BEFORE),
    ]
    if family.thinks:
        shared.append(Case("reasoning before the call", THINKING + THOUGHT + THINKING_END + write(ONE), ONE))
    whole = write(WHITESPACE)
    shared.append(Case("cut by max_tokens", whole[: whole.index("x = 1") + 3], (), cut=True))
    return (*shared, *family.real)


# Placeholders a family's markers replace in a reasoning case (``read`` swaps them for the tokenizer's own).
THINKING, THINKING_END = "\x00think\x00", "\x00/think\x00"


# -- how each family writes calls: its template's rendering of an assistant's tool calls ------------------


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _text(value: Any) -> str:
    """Write a value as the XML-like templates do: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else _json(value)


def json_tools(calls: Sequence[Call]) -> str:
    """Hermes, Qwen2.5, QwQ, Qwen3: ``{"name": ..., "arguments": ...}`` on its own line in ``<tool_call>`` per call."""
    return "\n".join(
        "<tool_call>\n" + _json({"name": c.name, "arguments": c.arguments}) + "\n</tool_call>" for c in calls
    )


def qwen3_coder(calls: Sequence[Call]) -> str:
    """Qwen3-Coder, Qwen3.5: ``<function=NAME>``, one ``<parameter=KEY>`` per argument, the value on its own lines."""
    return "\n".join(
        "<tool_call>\n<function="
        + c.name
        + ">\n"
        + "".join(f"<parameter={k}>\n{_text(v)}\n</parameter>\n" for k, v in c.arguments.items())
        + "</function>\n</tool_call>"
        for c in calls
    )


def llama3(calls: Sequence[Call]) -> str:
    """Llama 3.x: ``{"name": NAME, "parameters": {...}}`` (the template's own words), more than one by ``; ``."""
    return "; ".join('{"name": "' + c.name + '", "parameters": ' + json.dumps(c.arguments) + "}" for c in calls)


def mistral_json(calls: Sequence[Call]) -> str:
    """Mistral Nemo: ``[TOOL_CALLS]`` and one JSON list of calls, each with its 9-character id."""
    listed = [{"name": c.name, "arguments": c.arguments, "id": c.id or f"{i:09d}"} for i, c in enumerate(calls)]
    return "[TOOL_CALLS]" + _json(listed)


def mistral_call_id(calls: Sequence[Call]) -> str:
    """Mistral Small 3.2: ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` per call."""
    return "".join(
        f"[TOOL_CALLS]{c.name}[CALL_ID]{c.id or f'{i:09d}'}[ARGS]{_json(c.arguments)}" for i, c in enumerate(calls)
    )


def devstral(calls: Sequence[Call]) -> str:
    """Devstral: ``[TOOL_CALLS]NAME[ARGS]{...}`` per call."""
    return "".join(f"[TOOL_CALLS]{c.name}[ARGS]{_json(c.arguments)}" for c in calls)


def gemma4(calls: Sequence[Call]) -> str:
    """Gemma 4: ``<|tool_call>call:NAME{key:VALUE,...}<tool_call|>``, strings between ``<|"|>`` marks."""

    def value(v: Any, keys: bool) -> str:
        if isinstance(v, str):
            return '<|"|>' + v + '<|"|>'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, dict):
            return "{" + ",".join(name(k, keys) + ":" + value(x, keys) for k, x in sorted(v.items())) + "}"
        if isinstance(v, list):
            return "[" + ",".join(value(x, keys) for x in v) + "]"
        return "null" if v is None else _json(v)

    def name(key: str, keys: bool) -> str:
        return key

    return "".join(
        "<|tool_call>call:"
        + c.name
        + "{"
        + ",".join(k + ":" + value(v, False) for k, v in sorted(c.arguments.items()))
        + "}<tool_call|>"
        for c in calls
    )


DS_BEGIN, DS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"  # noqa: RUF001  (DeepSeek's own tokens)
DS_CALL, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"  # noqa: RUF001


def deepseek_v31(calls: Sequence[Call]) -> str:
    """DeepSeek V3.1: ``NAME<｜tool▁sep｜>{json}`` per call inside the calls block."""  # noqa: RUF002
    return DS_BEGIN + "".join(f"{DS_CALL}{c.name}{DS_SEP}{_json(c.arguments)}{DS_CALL_END}" for c in calls) + DS_END


def deepseek_r1(calls: Sequence[Call]) -> str:
    """DeepSeek R1 distills: ``function<｜tool▁sep｜>NAME`` then the arguments in a json code block."""  # noqa: RUF002
    return (
        DS_BEGIN
        + "".join(f"{DS_CALL}function{DS_SEP}{c.name}\n```json\n{_json(c.arguments)}\n```{DS_CALL_END}" for c in calls)
        + DS_END
    )


def glm46(calls: Sequence[Call]) -> str:
    """GLM-4.6: ``<tool_call>NAME``, then each ``<arg_key>`` and ``<arg_value>`` pair on its own line."""
    return "".join(
        "\n<tool_call>"
        + c.name
        + "".join(f"\n<arg_key>{k}</arg_key>\n<arg_value>{_text(v)}</arg_value>" for k, v in c.arguments.items())
        + "\n</tool_call>"
        for c in calls
    )


def glm47(calls: Sequence[Call]) -> str:
    """GLM-4.7: as GLM-4.6 without the newlines between tags."""
    return "".join(
        "<tool_call>"
        + c.name
        + "".join(f"<arg_key>{k}</arg_key><arg_value>{_text(v)}</arg_value>" for k, v in c.arguments.items())
        + "</tool_call>"
        for c in calls
    )


def kimi_k2(calls: Sequence[Call]) -> str:
    """Kimi K2: ``<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{json}`` per call."""
    return (
        "<|tool_calls_section_begin|>"
        + "".join(
            f"<|tool_call_begin|>functions.{c.name}:{i}<|tool_call_argument_begin|>{_json(c.arguments)}<|tool_call_end|>"
            for i, c in enumerate(calls)
        )
        + "<|tool_calls_section_end|>"
    )


def minimax_m2(calls: Sequence[Call]) -> str:
    """MiniMax M2: ``<invoke name="NAME">`` with ``<parameter name="KEY">VALUE</parameter>`` lines."""
    return (
        "<minimax:tool_call>\n"
        + "".join(
            f'<invoke name="{c.name}">\n'
            + "".join(f'<parameter name="{k}">{_text(v)}</parameter>\n' for k, v in c.arguments.items())
            + "</invoke>\n"
            for c in calls
        )
        + "</minimax:tool_call>"
    )


def _kimi_ids(calls: Sequence[Call]) -> tuple[Call, ...]:
    return tuple(Call(c.name, c.arguments, f"functions.{c.name}:{i}") for i, c in enumerate(calls))


QWEN = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>")
LLAMA = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>")
MISTRAL = ("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]")
MISTRAL_ARGS = (*MISTRAL, "[ARGS]", "[CALL_ID]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[SYSTEM_PROMPT]")
DEEPSEEK = (DS_BEGIN, DS_END, DS_CALL, DS_CALL_END, DS_SEP, "<think>", "</think>")
GLM = ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<tool_call>")
GLM_ALL = (*GLM, "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<think>", "</think>")
KIMI = ("<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "<think>", "</think>")
KIMI_CALLS = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_end|>")
KIMI_ALL = (*KIMI, *KIMI_CALLS, "<|tool_call_argument_begin|>")
GEMMA = ("<bos>", "<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<|channel>", "<channel|>")
MINIMAX = ("]~!b[", "]~b]", "[e~[", "<minimax:tool_call>", "</minimax:tool_call>", "<think>", "</think>")


FAMILIES: tuple[Family, ...] = (
    Family("qwen3", "Qwen-Qwen3-0.6B", QWEN, json_tools, thinks=True),
    Family("qwen3-coder", "Qwen3-Coder", QWEN, qwen3_coder),
    Family("qwen3.5", "Qwen3.5-4B", QWEN, qwen3_coder, thinks=True),
    Family(
        "qwen2.5",
        "Qwen-Qwen2.5-7B-Instruct",
        QWEN,
        json_tools,
        real=(
            Case(
                "llama.cpp: special_function",
                '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
                (Call("special_function", {"arg1": 1}),),
            ),
        ),
    ),
    Family("qwq", "Qwen-QwQ-32B", QWEN, json_tools, thinks=True),
    Family(
        "hermes",
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
        (*LLAMA, "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"),
        json_tools,
    ),
    Family(
        "hermes",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
        (*LLAMA, "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"),
        json_tools,
        real=(
            Case(
                "llama.cpp: python",
                '<tool_call>\n{"name": "python", "arguments": {"code": "print(\'hey\')"}}\n</tool_call>',
                (Call("python", {"code": "print('hey')"}),),
            ),
        ),
    ),
    *(
        Family(
            name,
            file,
            LLAMA,
            llama3,
            real=(
                Case(
                    "llama.cpp: special_function",
                    '{"name": "special_function", "parameters": {"arg1": 1}}',
                    (Call("special_function", {"arg1": 1}),),
                ),
                Case(
                    "llama.cpp: the python built-in",
                    "<|python_tag|>python.call(code=\"print('hey')\")",
                    (Call("python", {"code": "print('hey')"}),),
                ),
                Case("<|python_tag|> before the JSON", "<|python_tag|>" + llama3(ONE), ONE),
                Case("an answer in JSON, no call", ANSWER, (), content=ANSWER),
            ),
        )
        for name, file in (
            ("llama3.1", "meta-llama-Llama-3.1-8B-Instruct"),
            ("llama3.2", "meta-llama-Llama-3.2-3B-Instruct"),
            ("llama3.3", "meta-llama-Llama-3.3-70B-Instruct"),
        )
    ),
    Family(
        "mistral-nemo",
        "mistralai-Mistral-Nemo-Instruct-2407",
        MISTRAL,
        mistral_json,
        real=(
            Case(
                "llama.cpp: special_function with its id",
                '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]',
                (Call("special_function", {"arg1": 1}, "123456789"),),
            ),
        ),
    ),
    Family(
        "mistral-small-3.2",
        "Mistral-Small-3.2-24B-Instruct-2506",
        MISTRAL_ARGS,
        mistral_call_id,
        real=(
            Case(
                "llama.cpp: special_function with its id",
                '[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}',
                (Call("special_function", {"arg1": 1}, "123456789"),),
            ),
            Case(
                "llama.cpp: two calls with their ids",
                '[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}'
                '[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{"arg1": 1, "arg2": 2}',
                (
                    Call("special_function", {"arg1": 1}, "000000001"),
                    Call("special_function_with_opt", {"arg1": 1, "arg2": 2}, "000000002"),
                ),
            ),
        ),
    ),
    Family(
        "devstral",
        "unsloth-mistral-Devstral-Small-2507",
        MISTRAL_ARGS,
        devstral,
        real=(
            Case(
                "llama.cpp: content, then special_function",
                'Hello, world!\nWhat\'s up?[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
                (Call("special_function", {"arg1": 1}),),
                content="Hello, world!\nWhat's up?",
            ),
        ),
    ),
    Family(
        "gemma4",
        "google-gemma-4-31B-it",
        GEMMA,
        gemma4,
        thinks=True,
        real=(
            Case(
                "llama.cpp: content, then get_time",
                'Hello, world!\nWhat\'s up?<|tool_call>call:get_time{city:<|"|>Paris<|"|>}<tool_call|>',
                (Call("get_time", {"city": "Paris"}),),
                content="Hello, world!\nWhat's up?",
            ),
        ),
    ),
    Family(
        "deepseek-v3.1",
        "deepseek-ai-DeepSeek-V3.1",
        DEEPSEEK,
        deepseek_v31,
        thinks=True,
        real=(
            Case(
                "llama.cpp: reasoning, content, two calls",
                "REASONING</think>CONTENT"
                + DS_BEGIN
                + DS_CALL
                + "get_time"
                + DS_SEP
                + '{"city": "Paris"}'
                + DS_CALL_END
                + DS_CALL
                + "get_weather"
                + DS_SEP
                + '{"city": "Paris"}'
                + DS_CALL_END
                + DS_END,
                PARALLEL,
                content="CONTENT",
            ),
        ),
    ),
    *(
        Family(
            "deepseek-r1-distill",
            file,
            DEEPSEEK,
            deepseek_r1,
            thinks=True,
            real=(
                Case(
                    "llama.cpp: special_function",
                    DS_BEGIN
                    + DS_CALL
                    + "function"
                    + DS_SEP
                    + 'special_function\n```json\n{"arg1": 1}```'
                    + DS_CALL_END
                    + DS_END,
                    (Call("special_function", {"arg1": 1}),),
                ),
            ),
        )
        for file in ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B")
    ),
    Family(
        "glm-4.6",
        "GLM-4.6",
        GLM_ALL,
        glm46,
        thinks=True,
        real=(
            Case(
                "llama.cpp: special_function",
                "<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
                (Call("special_function", {"arg1": 1}),),
            ),
        ),
    ),
    Family(
        "glm-4.7",
        "GLM-4.7-Flash",
        GLM_ALL,
        glm47,
        thinks=True,
        real=(
            Case(
                "llama.cpp: reasoning, then special_function",
                "I'm\nthinking</think><tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value>"
                "</tool_call>",
                (Call("special_function", {"arg1": 1}),),
            ),
        ),
    ),
    *(
        Family(
            "kimi-k2",
            file,
            KIMI_ALL,
            kimi_k2,
            thinks=file == "Kimi-K2-Thinking",
            real=(
                Case(
                    "llama.cpp: special_function",
                    "<|tool_calls_section_begin|><|tool_call_begin|>functions.special_function:0"
                    '<|tool_call_argument_begin|>{"arg1": 1}<|tool_call_end|><|tool_calls_section_end|>',
                    (Call("special_function", {"arg1": 1}, "functions.special_function:0"),),
                ),
            ),
        )
        for file in ("Kimi-K2-Instruct", "moonshotai-Kimi-K2", "Kimi-K2-Thinking")
    ),
    Family(
        "minimax-m2",
        "MiniMax-M2",
        MINIMAX,
        minimax_m2,
        thinks=True,
        real=(
            Case(
                "llama.cpp: reasoning, then special_function",
                'Let\'s call a tool:\n</think>\n\n<minimax:tool_call>\n<invoke name="special_function">\n<parameter '
                'name="arg1">1</parameter>\n</invoke>\n</minimax:tool_call>',
                (Call("special_function", {"arg1": 1}),),
            ),
        ),
    ),
)


def expected_calls(family: Family, case: Case) -> tuple[Call, ...]:
    """Return the calls ``case`` must give, with the ids the family's format writes (Kimi's, Mistral's)."""
    if not case.calls or any(c.id is not None for c in case.calls):
        return case.calls
    if family.write is kimi_k2:
        return _kimi_ids(case.calls)
    if family.write in (mistral_json, mistral_call_id):  # the writers number the ids the model would write
        return tuple(Call(c.name, c.arguments, f"{i:09d}") for i, c in enumerate(case.calls))
    return case.calls


# -- running a case through the worker's path ----------------------------------------------------------------


@dataclass
class Reply:
    """What the handler would send: the calls parsed (OpenAI shape), the kept ones, content, reasoning."""

    calls: list[dict[str, Any]]
    unparsed: list[dict[str, str]]
    content: str
    reasoning: str


def tokenizer_for(family: Family, folder: Path) -> Any:
    """Return mlx_lm's ``TokenizerWrapper`` for a tokenizer with the family's template and special tokens."""
    from mlx_lm import tokenizer_utils
    from tokenizers import Tokenizer, models, pre_tokenizers

    real = template(family.template)
    words = {"[UNK]": 0}
    raw = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = list(dict.fromkeys([*family.specials, *(t for t in (real.bos_token, real.eos_token) if t)]))
    raw.add_special_tokens(specials)
    folder.mkdir(parents=True, exist_ok=True)
    raw.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": real.source,
        "bos_token": real.bos_token or None,
        "eos_token": real.eos_token or specials[-1],
        "unk_token": "[UNK]",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return tokenizer_utils.load(folder)


def first_state(tokenizer: Any) -> str:
    """Return the state a reply starts in, as mlx_lm's ``_tokenize`` decides it from the rendered prompt."""
    if not tokenizer.has_thinking:
        return "normal"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What time is it in Tokyo?"}],
        tools=TOOLS,
        add_generation_prompt=True,
        tokenize=False,
    )
    start, end = prompt.rfind(tokenizer.think_start), prompt.rfind(tokenizer.think_end)
    return "reasoning" if start > end else "normal"


def pieces(text: str, specials: Sequence[str]) -> Iterator[str]:
    """Yield ``text`` as a model's tokens arrive: each special token whole, other text three characters at a time."""
    pattern = "(" + "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)) + ")"
    for part in re.split(pattern, text) if specials else [text]:
        if part in specials:
            yield part
        else:
            yield from (part[i : i + 3] for i in range(0, len(part), 3))


def read(family: Family, case: Case, tokenizer: Any) -> Reply:
    """Run ``case`` as the worker's handler does (module docstring) and return what it would send."""
    from mlx_agent.runtime.reply.tool_calls import KeepingToolCallFormatter, as_written, split_calls

    initial = first_state(tokenizer)
    text = case.text
    if tokenizer.has_thinking:
        opened = "" if initial == "reasoning" else tokenizer.think_start
        text = text.replace(THINKING, opened).replace(THINKING_END, tokenizer.think_end)
        if initial == "reasoning" and tokenizer.think_end not in text:
            text = tokenizer.think_end + text  # a reply to a prompt that opened the thinking closes it first
    server: Any = importlib.import_module("mlx_lm.server")  # its names as the worker's handler finds them
    machine = server.make_text_state_machine(tokenizer, [])
    state = machine.make_state(initial)
    split, flush, discard = (
        server.TextStateMachine.split,
        server.TextStateMachine.flush,
        server.TextStateMachine.discard,
    )
    previous, content, reasoning, tool_text = initial, "", "", ""
    tool_calls: list[str] = []

    def collect(segments: Sequence[tuple[str | None, str]]) -> None:
        nonlocal previous, content, reasoning, tool_text
        for current, clean in segments:  # mlx_lm's handle_completion, state by state
            if current == "reasoning":
                reasoning += clean
            elif current == "tool":
                tool_text += clean
            elif current == "normal":
                if previous == "tool":
                    tool_calls.append(tool_text)
                    tool_text = ""
                content += clean
            previous = current  # type: ignore[assignment]

    markers = [*family.specials, *(m for m in (tokenizer.tool_call_start, tokenizer.tool_call_end) if m)]
    for piece in pieces(text, markers):
        state, segments = split(state, piece)
        collect(segments)
    if case.cut:
        state, flushed, current = flush(state)
        collect([(current, flushed)])
    else:
        state, current = discard(state)
        collect([(current, "")])
    if previous == "tool" and tool_text:
        tool_calls.append(tool_text)
    formatted = KeepingToolCallFormatter(tokenizer.tool_parser, TOOLS)(tool_calls)
    parsed, unparsed = split_calls(formatted)
    for index, call in enumerate(unparsed):  # the handler's generate_response: what did not parse is content
        last = index == len(unparsed) - 1
        content += as_written(call, tokenizer.tool_call_start, tokenizer.tool_call_end, not (case.cut and last))
    marked = [dict(u) for u in unparsed if getattr(u, "marked", True)]  # (main has no PlainText: all marked)
    return Reply(parsed, marked, content, reasoning)


def exact(family: Family, case: Case, reply: Reply) -> bool:
    """Whether ``reply`` is what a client must get for ``case``: every call exact, the text kept, nothing else."""
    want = expected_calls(family, case)
    got = [
        Call(c["function"]["name"], json.loads(c["function"]["arguments"]), c["id"] if _own_id(c["id"]) else None)
        for c in reply.calls
    ]
    if [(c.name, c.arguments, c.id) for c in got] != [(c.name, c.arguments, c.id) for c in want]:
        return False
    if case.cut:
        return bool(reply.unparsed)  # the call as written, with the marker, never silently dropped
    return not reply.unparsed and reply.content.strip() == case.content.strip()


def _own_id(call_id: str) -> bool:
    """Whether an id is the model's own (mlx_lm gives a call without one a fresh uuid4)."""
    return not re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", call_id)


@contextlib.contextmanager
def installed(fixed: bool = True) -> Iterator[None]:
    """Install what the worker installs into mlx_lm's parsing, and put mlx_lm back as it was on exit.

    ``fixed=False`` leaves ``family_parsers`` out: mlx_lm's parsers as the worker had them before it.
    """
    from mlx_agent.runtime.reply import lenient_tools

    places = [*lenient_tools.TYPED_READERS.items(), *lenient_tools.TEXT_KEEPING_READERS.items()]
    ours: list[str] = []
    if fixed:
        from mlx_agent.runtime.reply import family_parsers
        from mlx_agent.tool_formats import OUR_PARSERS

        places += [
            ("mlx_lm.tokenizer_utils", "_infer_tool_parser"),
            ("mlx_lm.tool_parsers.mistral", "_parse_header_calls"),
        ]
        places += [(f"mlx_lm.tool_parsers.{module}", "parse_tool_call") for module in family_parsers.WRAPS]
        ours = [f"mlx_lm.tool_parsers.{name}" for name in OUR_PARSERS]
    saved = [(importlib.import_module(module), name) for module, name in places]
    values = [getattr(module, name) for module, name in saved]
    modules = {name: sys.modules.get(name) for name in ours}
    try:
        lenient_tools.install()
        if fixed:
            family_parsers.install()
        yield
    finally:
        for (module, name), value in zip(saved, values, strict=True):
            setattr(module, name, value)
        for name, module_ in modules.items():
            if module_ is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module_


def results(families: Sequence[Family] = FAMILIES, fixed: bool = True) -> Iterator[tuple[Family, Case, Reply, bool]]:
    """Yield every case of every family with the reply the worker's path gives and whether it is exact.

    ``fixed=False`` leaves ``family_parsers`` out (mlx_lm's parsers as the worker had them before it), in a
    process where it was never installed.
    """
    with installed(fixed), tempfile.TemporaryDirectory(prefix="families-") as folder:
        for index, family in enumerate(families):
            tokenizer = tokenizer_for(family, Path(folder) / str(index))
            for case in cases(family):
                reply = read(family, case, tokenizer)
                yield family, case, reply, exact(family, case, reply)


def family_rows(families: Sequence[Family] = FAMILIES, fixed: bool = True) -> list[dict[str, Any]]:
    """Return one row per family and template: ``{"family", "template", "parser", "exact", "total", "failed"}``.

    ``parser`` is the one the worker's selection gives the template (``tool_formats.parser_for``); ``exact`` counts
    the cases whose calls came back exactly, of ``total``; ``failed`` names the others.
    """
    parsers = parser_names(families)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for family, case, _, ok in results(families, fixed):
        row = rows.setdefault(
            (family.name, family.template),
            {
                "family": family.name,
                "template": family.template,
                "parser": parsers[family.template],
                "exact": 0,
                "total": 0,
                "failed": [],
            },
        )
        row["total"] += 1
        row["exact"] += ok
        if not ok:
            row["failed"].append(case.name)
    return list(rows.values())


def parser_names(families: Sequence[Family] = FAMILIES) -> Mapping[str, str | None]:
    """Return the parser the worker's selection gives each family's template (for the table)."""
    from mlx_agent.tool_formats import parser_for

    return {family.template: parser_for(template(family.template).source) for family in families}
