"""Every corpus family's tool calls, as its models write them, come back exact through the worker's own path.

The cases are ``tests/tool_call_cases.py``; the path is ``tests/tool_call_reading.py``: mlx_lm's tokenizer load
(its parser selection, with ``family_parsers`` installed), its text state machine fed token by token, and our
``KeepingToolCallFormatter``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from mlx_agent.runtime.reply import family_parsers
from mlx_agent.tool_formats import parser_for
from tests import tool_call_cases as cc
from tests import tool_call_reading as reading
from tests.template_corpus import template

CASES = [(family, case) for family in cc.FAMILIES for case in cc.cases(family)]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Load each family's tokenizer through mlx_lm's own load, with the worker's parsers installed (then removed)."""
    folder = tmp_path_factory.mktemp("families")
    with reading.installed():
        yield {f.template: reading.tokenizer_for(f, folder / f.template) for f in cc.FAMILIES}


@pytest.fixture
def fixed() -> Iterator[None]:
    """Install the worker's parsers for one test, then put mlx_lm back as it was."""
    with reading.installed():
        yield


@pytest.mark.parametrize(("family", "case"), CASES, ids=[f"{f.template}: {c.name}" for f, c in CASES])
def test_every_case_of_every_family_is_exact(family: cc.Family, case: cc.Case, tokenizers: dict[str, Any]) -> None:
    """Each call arrives with its exact name, arguments and own id; a cut call comes back as text, never a call."""
    reply = reading.read(family, case, tokenizers[family.template])
    assert reading.exact(family, case, reply), reply


def test_the_worker_loads_the_parser_the_plan_declares(tokenizers: dict[str, Any]) -> None:
    """mlx_lm's load picks, for every family's template, the parser tool_formats declares (ours where it has none)."""
    for family in cc.FAMILIES:
        module = parser_for(template(family.template).source)
        assert module is not None
        expected = __import__(f"mlx_lm.tool_parsers.{module}", fromlist=["parse_tool_call"])
        assert tokenizers[family.template].tool_call_start == expected.tool_call_start, family.template


@pytest.mark.fast
def test_every_corpus_template_with_a_call_syntax_is_a_family() -> None:
    """Each corpus template whose calls a parser reads has its cases here (gpt-oss's Harmony has its own tests)."""
    from tests.template_corpus import corpus

    read = {t.name for t in corpus() if parser_for(t.source) is not None}
    assert read == {f.template for f in cc.FAMILIES}
    harmony_or_none = {t.family for t in corpus() if t.name not in read}
    assert harmony_or_none == {"gpt-oss", "gemma2", "gemma3", "phi3.5", "phi4-mini", "smollm3"}


@pytest.mark.fast
def test_mlx_lm_choice_stands_and_ours_fills_only_its_gaps() -> None:
    """The wrapped selection returns mlx_lm's own answer when it has one, ours only when it has none."""

    class Tokenizer:
        chat_template = '{{ "<｜tool▁calls▁begin｜><｜tool▁sep｜>" }}'  # noqa: RUF001

    choose = family_parsers.with_our_parsers(lambda tokenizer: None)
    assert choose(Tokenizer()) == "deepseek_v3"
    assert family_parsers.with_our_parsers(lambda tokenizer: "mistral")(Tokenizer()) == "mistral"
    Tokenizer.chat_template = "plain"
    assert choose(Tokenizer()) is None


def test_installing_twice_wraps_once(fixed: None) -> None:
    """A second install leaves each wrapped parser as the first install made it."""
    import mlx_lm.tokenizer_utils as tokenizer_utils
    import mlx_lm.tool_parsers.glm47 as glm47

    first = (tokenizer_utils._infer_tool_parser, glm47.parse_tool_call)
    family_parsers.install()
    assert (tokenizer_utils._infer_tool_parser, glm47.parse_tool_call) == first


@pytest.mark.fast
def test_mistral_small_keeps_the_model_id_and_the_name() -> None:
    """``NAME[CALL_ID]ID[ARGS]{...}`` is the call NAME with the model's id, not a call named ID."""
    assert family_parsers.header_calls('get_time[CALL_ID]123456789[ARGS]{"city": "x"}') == [
        {"name": "get_time", "arguments": {"city": "x"}, "id": "123456789"}
    ]
    assert family_parsers.header_calls('get_time[ARGS]{"city": "x"}') == [
        {"name": "get_time", "arguments": {"city": "x"}}
    ]
    with pytest.raises(ValueError, match="Could not parse"):
        family_parsers.header_calls('get_time[CALL_ID]1[ARGS]{"city": ')


def test_an_edit_keeps_its_newlines_in_glm_and_minimax(fixed: None) -> None:
    """GLM and MiniMax string values keep the whitespace written; a value read as JSON stays JSON."""
    import mlx_lm.tool_parsers.glm47 as glm47
    import mlx_lm.tool_parsers.minimax_m2 as minimax_m2

    glm = glm47.parse_tool_call(
        "Edit<arg_key>old_string</arg_key><arg_value>x = 1\n</arg_value><arg_key>n</arg_key><arg_value> 5 </arg_value>"
        '<arg_key>q</arg_key><arg_value>"quoted"</arg_value>',
        None,
    )
    assert glm["arguments"] == {"old_string": "x = 1\n", "n": 5, "q": "quoted"}
    minimax = minimax_m2.parse_tool_call('<invoke name="Edit">\n<parameter name="s">\n  y\n\n</parameter>\n</invoke>\n')
    assert minimax["arguments"] == {"s": "\n  y\n\n"}


def test_the_family_table_counts_every_case() -> None:
    """``family_rows`` gives one row per family's template, every case counted and, with our parsers, exact."""
    rows = cc.family_rows(cc.FAMILIES[:2])
    assert [(r["template"], r["parser"], r["exact"], r["failed"]) for r in rows] == [
        (f.template, parser_for(template(f.template).source), len(cc.cases(f)), []) for f in cc.FAMILIES[:2]
    ]
    assert json.loads(json.dumps(rows)) == rows


@pytest.mark.fast
def test_llama_reads_only_calls() -> None:
    """Calls are read; an ordinary answer that starts like one is no call; a broken call raises (kept, marked)."""
    from mlx_agent.runtime.reply.parsers import NotACall, llama3_json

    def parse(text: str, tools: Any = cc.TOOLS) -> Any:
        return llama3_json.parse_tool_call(text, tools)

    assert parse(' "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {}}') == [
        {"name": "f", "arguments": {"a": 1}},
        {"name": "g", "arguments": {}},
    ]
    for answer, tools in ((' "Bob", "age": 3}', cc.TOOLS), (' "f", "parameters": {"a": 1}}', None)):
        with pytest.raises(NotACall):
            parse(answer, tools)
    for broken in (' "f", "parameters": [1]}', ' "f", "parameters": {"a": 1}} and more', "os.system('x')"):
        with pytest.raises(ValueError) as raised:
            parse(broken)
        assert not isinstance(raised.value, NotACall)


@pytest.mark.fast
def test_deepseek_refuses_a_call_without_its_end() -> None:
    """A DeepSeek call cut before its end marker, or text that is not a call, raises rather than guessing."""
    from mlx_agent.runtime.reply.parsers import deepseek_v3 as ds

    whole = f'{ds.CALL_BEGIN}f{ds.SEP}{{"a": 1}}{ds.CALL_END}'
    assert ds.parse_tool_call(whole) == {"name": "f", "arguments": {"a": 1}}
    for text in (whole[: -len(ds.CALL_END)], "no call", f"{ds.CALL_BEGIN}f{ds.SEP}[1]{ds.CALL_END}"):
        with pytest.raises(ValueError):
            ds.parse_tool_call(text)
