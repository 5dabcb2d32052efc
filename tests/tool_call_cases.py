"""Each corpus family's tool calls as its models write them, and the cases a client must get exactly (no tests).

A family is a real template of the corpus (``tests/templates/``), the special tokens its checkpoint has (the
tool-call and thinking markers), and how its models write a call: the template's own rendering of a call
(``Family.write``, from ``tests/tool_call_writers.py``), plus the literal outputs of llama.cpp's
``tests/test-chat.cpp`` for that template (``Family.real``). Every family gets the same cases (``cases``): one
call, parallel calls, nested objects and arrays, strings with quotes, backslashes and unicode, strings with
leading and trailing newlines and whitespace, numbers, booleans and null, text before the call, a reasoning
block before the call (families that think), and a call cut by max_tokens.

``tests/tool_call_reading.py`` runs a case as the worker does (mlx_lm's tokenizer load and parser selection,
its text state machine fed token by token, our formatter). ``family_rows()`` is the per-family table (calls
parsed exactly / total) that ``scripts/bench_families.py`` prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.template_corpus import template
from tests.tool_call_writers import (
    DEEPSEEK,
    DS_BEGIN,
    DS_CALL,
    DS_CALL_END,
    DS_END,
    DS_SEP,
    GEMMA,
    GLM_ALL,
    KIMI_ALL,
    LLAMA,
    MINIMAX,
    MISTRAL,
    MISTRAL_ARGS,
    QWEN,
    Call,
    deepseek_r1,
    deepseek_v31,
    devstral,
    gemma4,
    glm46,
    glm47,
    json_tools,
    kimi_ids,
    kimi_k2,
    llama3,
    minimax_m2,
    mistral_call_id,
    mistral_json,
    qwen3_coder,
)


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
    *(
        Family(
            family,
            file,
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
        )
        for family, file in (("glm-4.5", "zai-org-GLM-4.5-Air"), ("glm-4.6", "GLM-4.6"))  # the same call syntax
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
        return kimi_ids(case.calls)
    if family.write in (mistral_json, mistral_call_id):  # the writers number the ids the model would write
        return tuple(Call(c.name, c.arguments, f"{i:09d}") for i, c in enumerate(case.calls))
    return case.calls


def family_rows(families: Sequence[Family] = FAMILIES, fixed: bool = True) -> list[dict[str, Any]]:
    """Return one row per family and template: ``{"family", "template", "parser", "exact", "total", "failed"}``.

    ``parser`` is the one the worker's selection gives the template (``tool_formats.parser_for``); ``exact`` counts
    the cases whose calls came back exactly, of ``total``; ``failed`` names the others.
    """
    parsers = parser_names(families)
    from tests.tool_call_reading import results

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
