"""What the plan says a model can do for agents, over the corpus of real chat templates, and its warnings."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.errors import InvalidArguments
from mlx_agent.plan.agent_support import (
    CANNOT_RENDER,
    HARMONY_TOKENS,
    NO_PARSER,
    NO_TEMPLATE,
    NO_TOOLS,
    agent_warnings,
    agents_record,
    installed_parsers,
    template_file,
)
from mlx_agent.plan.requests import ModelRequest
from mlx_agent.tool_formats import OUR_PARSERS
from tests.template_corpus import Template, corpus, template

# Per template of the corpus: renders tools, the parser the worker will use, thinks, what it cannot render.
EXPECTED: dict[str, tuple[bool, str | None, bool, str | None]] = {
    "Qwen-Qwen3-0.6B": (True, "json_tools", True, None),
    "Qwen3-Coder": (True, "qwen3_coder", False, None),
    "Qwen3.5-4B": (True, "qwen3_coder", True, None),
    "Qwen-Qwen2.5-7B-Instruct": (True, "json_tools", False, None),
    "Qwen-QwQ-32B": (True, "json_tools", True, None),
    "meta-llama-Llama-3.1-8B-Instruct": (True, "llama3_json", False, None),
    "meta-llama-Llama-3.2-3B-Instruct": (True, "llama3_json", False, None),
    "meta-llama-Llama-3.3-70B-Instruct": (True, "llama3_json", False, None),
    "mistralai-Mistral-Nemo-Instruct-2407": (True, "mistral", False, None),
    "Mistral-Small-3.2-24B-Instruct-2506": (True, "mistral", False, None),
    "unsloth-mistral-Devstral-Small-2507": (True, "mistral", False, None),
    "google-gemma-2-2b-it": (False, None, False, "Conversation roles must alternate"),
    "google-gemma-3-it": (False, None, False, "Conversation roles must alternate"),
    "google-gemma-4-31B-it": (True, "gemma4", True, None),
    "deepseek-ai-DeepSeek-V3.1": (False, "deepseek_v3", True, None),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (False, "deepseek_v3", True, None),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (False, "deepseek_v3", True, None),
    "zai-org-GLM-4.5-Air": (True, "glm47", True, None),
    "GLM-4.6": (True, "glm47", True, None),
    "GLM-4.7-Flash": (True, "glm47", True, None),
    "Kimi-K2-Instruct": (True, "kimi_k2", False, "SecurityError: access to attribute 'append' of 'list'"),
    "moonshotai-Kimi-K2": (True, "kimi_k2", False, None),
    "Kimi-K2-Thinking": (True, "kimi_k2", True, "SecurityError: access to attribute 'append' of 'list'"),
    "openai-gpt-oss-120b": (True, "harmony", True, None),
    "MiniMax-M2": (True, "minimax_m2", True, None),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": (True, "json_tools", False, None),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": (True, "json_tools", False, None),
    "microsoft-Phi-3.5-mini-instruct": (False, None, False, None),
    "microsoft-Phi-4-mini-instruct": (False, None, False, None),
    "HuggingFaceTB-SmolLM3-3B": (False, None, True, None),  # its tools are `xml_tools`, not `tools`
}
RUNTIME: Any = {"launcher": "wrapped", "runtime_sources": {"mlx_lm/tool_parsers/json_tools.py": "0" * 64}}


def checkpoint(directory: Path, config: dict[str, Any], extra: dict[str, str] | None = None) -> dict[str, Any]:
    """Write a checkpoint's tokenizer files and return its source record as the plan binds a plain directory."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {"tokenizer_config.json": json.dumps(config), **(extra or {})}
    records = []
    for name, text in sorted(files.items()):
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        data = path.read_bytes()
        records.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"kind": "path", "path": str(directory), "model_type": None, "files": records}


def corpus_source(entry: Template, directory: Path) -> dict[str, Any]:
    """Return a checkpoint holding a corpus template in its tokenizer_config.json, with its special tokens."""
    config = {"chat_template": entry.source, "bos_token": entry.bos_token, "eos_token": entry.eos_token}
    return checkpoint(directory, config)


def record_of(source: dict[str, Any], **options: Any) -> Any:
    """Return the agents record the plan makes of a checkpoint (the wrapped mlx_lm worker's parser predicted)."""
    record, _ = agents_record(ModelRequest(**options), source, RUNTIME, predicts_parser=True, window=4096)
    return record


def warnings_of(record: Any) -> list[str]:
    """Return the plan's warnings for one model named m."""
    model: Any = {"served_model_name": "m", "agents": record}  # the two keys the warnings read
    return agent_warnings([model])


@pytest.mark.fast
def test_the_expectations_cover_the_whole_corpus() -> None:
    """Every template of the corpus has its expected record here, and nothing else does."""
    assert sorted(EXPECTED) == sorted(t.name for t in corpus())


@pytest.mark.fast
@pytest.mark.parametrize("entry", corpus(), ids=lambda t: t.name)
def test_every_real_template_gets_its_record_and_warnings(entry: Template, tmp_path: Path) -> None:
    """Tools, parser, thinking and render errors are the template's; each failing property is warned, with a remedy."""
    tools, parser, thinking, error = EXPECTED[entry.name]
    record = record_of(corpus_source(entry, tmp_path))
    assert (record["renders_tools"], record["tool_parser"], record["thinking"]) == (tools, parser, thinking)
    assert record["tool_parser_from"] == "template"
    assert record["chat_template"]["path"] == str(tmp_path / "tokenizer_config.json")
    assert (record["render_error"] is None) == (error is None)
    if error is not None:
        assert error in record["render_error"]
    expected = [
        *([f"m: {CANNOT_RENDER.format(error=record['render_error'])}"] if error else []),
        *([] if tools else [f"m: {NO_TOOLS}"]),
        *([] if parser else [f"m: {NO_PARSER}"]),
    ]
    assert warnings_of(record) == expected


@pytest.mark.fast
def test_the_warnings_read_plainly_with_their_remedy(tmp_path: Path) -> None:
    """The wording agents and people read is stable: what fails, and the option that fixes it."""
    record = record_of(corpus_source(template("google-gemma-2-2b-it"), tmp_path))
    assert warnings_of(record) == [
        "m: the chat template cannot render a tool call and its result (TemplateError: Conversation roles must "
        "alternate user/assistant/user/assistant/...): an agent's requests will fail; give a template that "
        "renders it with --chat-template FILE",
        "m: the chat template does not render `tools`: the model never sees an agent's tools; give one that does "
        "with --chat-template FILE",
        "m: no tool-call parser for this template: tool calls will arrive as text; name one with --tool-parser "
        "NAME, or give a template with --chat-template FILE",
    ]


@pytest.mark.fast
def test_a_checkpoint_without_a_template_says_only_that(tmp_path: Path) -> None:
    """No template: one warning, the root cause, and the record says so."""
    record = record_of(checkpoint(tmp_path, {"eos_token": "</s>"}))
    assert (record["chat_template"], record["renders_tools"], record["tool_parser"]) == (None, False, None)
    assert warnings_of(record) == [f"m: {NO_TEMPLATE}"]


@pytest.mark.fast
def test_a_template_file_beats_tokenizer_config_and_repeats_its_bound_identity(tmp_path: Path) -> None:
    """chat_template.jinja is what transformers reads first; the record names it with the source's own sha256."""
    qwen = template("Qwen3-Coder").source
    source = checkpoint(tmp_path, {"chat_template": "{{ messages[0].content }}"}, {"chat_template.jinja": qwen})
    record = record_of(source)
    [bound] = [f for f in source["files"] if f["name"] == "chat_template.jinja"]
    assert record["chat_template"] == {
        "source": "checkpoint",
        "path": str(tmp_path / "chat_template.jinja"),
        "name": None,
        "sha256": bound["sha256"],
        "size": bound["size"],
    }
    assert record["tool_parser"] == "qwen3_coder"


@pytest.mark.fast
def test_named_templates_render_tool_use_and_get_no_parser_as_mlx_lm_reads_them(tmp_path: Path) -> None:
    """Several named templates: tools render with ``tool_use``; mlx_lm infers no parser from a dict: warned."""
    hermes = template("NousResearch-Hermes-3-Llama-3.1-8B-tool_use").source
    named = [{"name": "default", "template": "{{ messages[0].content }}"}, {"name": "tool_use", "template": hermes}]
    record = record_of(checkpoint(tmp_path, {"chat_template": named, "bos_token": "<|begin_of_text|>"}))
    assert (record["chat_template"]["name"], record["renders_tools"], record["tool_parser"]) == ("tool_use", True, None)
    assert warnings_of(record) == [f"m: {NO_PARSER}"]


@pytest.mark.fast
def test_the_checkpoint_and_the_option_name_the_parser_before_the_template(tmp_path: Path) -> None:
    """tokenizer_config's tool_parser_type wins over the template's markers, and --tool-parser over both."""
    config = {"chat_template": template("Qwen3-Coder").source, "tool_parser_type": "json_tools"}
    source = checkpoint(tmp_path, config)
    assert (record_of(source)["tool_parser"], record_of(source)["tool_parser_from"]) == ("json_tools", "checkpoint")
    chosen = record_of(source, tool_parser="llama3_json")
    assert (chosen["tool_parser"], chosen["tool_parser_from"]) == ("llama3_json", "option")


@pytest.mark.fast
def test_a_chat_template_option_is_bound_by_sha256_and_fixes_the_warnings(tmp_path: Path) -> None:
    """--chat-template FILE replaces a template that cannot serve agents; its file is bound by content."""
    gemma = corpus_source(template("google-gemma-3-it"), tmp_path / "model")
    file = tmp_path / "qwen.jinja"
    file.write_text(template("Qwen3-Coder").source, encoding="utf-8")
    record = record_of(gemma, chat_template=str(file))
    assert record["chat_template"] == {
        "source": "file",
        "path": str(file),
        "name": None,
        "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
        "size": file.stat().st_size,
    }
    assert (record["renders_tools"], record["tool_parser"], record["render_error"]) == (True, "qwen3_coder", None)
    assert warnings_of(record) == []


@pytest.mark.parametrize(
    ("text", "why"),
    [(None, "not a file"), ("{% if %}", "not a readable jinja template"), (b"\xff\xfe", "not a readable jinja")],
)
@pytest.mark.fast
def test_a_chat_template_file_that_cannot_be_a_template_is_refused(
    tmp_path: Path, text: str | bytes | None, why: str
) -> None:
    """A missing file, invalid jinja, or bytes that are not UTF-8 are refused at preview, naming the option."""
    path = tmp_path / "t.jinja"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(InvalidArguments, match=why) as raised:
        template_file(str(path))
    assert raised.value.details["option"] == "--chat-template"


@pytest.mark.fast
def test_a_relative_chat_template_path_is_refused() -> None:
    """The command line takes an absolute path only (a models file's is read from its directory)."""
    with pytest.raises(InvalidArguments, match="not an absolute path"):
        template_file("templates/qwen.jinja")


@pytest.mark.fast
def test_installed_parsers_are_the_runtimes_modules_and_ours() -> None:
    """mlx_lm's parser modules are read from the sources the plan binds (no import), then ours are added."""
    runtime: Any = {
        "runtime_sources": {
            "mlx_lm/tool_parsers/__init__.py": "",
            "mlx_lm/tool_parsers/mistral.py": "",
            "mlx_lm/tool_parsers/sub/deep.py": "",
            "mlx_lm/server.py": "",
        }
    }
    assert installed_parsers(runtime) == sorted({"mistral", *OUR_PARSERS})


@pytest.mark.fast
def test_the_harmony_tokens_are_the_workers() -> None:
    """The plan calls a template Harmony by the very tokens the worker's Harmony reader needs."""
    from mlx_agent.runtime.reply.harmony import REQUIRED_TOKENS

    assert HARMONY_TOKENS == REQUIRED_TOKENS


def test_runtimes_other_than_wrapped_mlx_lm(tiny_model: Path, tmp_path: Path) -> None:
    """mlx-vlm picks its own parser (not predicted, not warned); an embedding model has no agents record."""
    from mlx_agent.plan.requests import ServeRequest
    from mlx_agent.plan.serve_plan import build_serve_plan
    from tests.fixtures.tiny_embed import build_tiny_embed

    vlm = build_serve_plan(ServeRequest(path=str(tiny_model), runtime="mlx-vlm", port=18998))["models"][0]
    assert vlm["agents"] is not None and vlm["agents"]["tool_parser_from"] == "runtime"
    assert agent_warnings([vlm]) == [f"{vlm['served_model_name']}: {NO_TOOLS}"]
    embed = build_tiny_embed(tmp_path / "embed")
    embedding = build_serve_plan(ServeRequest(path=str(embed), runtime="mlx-vlm-embed", port=18998))["models"][0]
    assert embedding["agents"] is None and agent_warnings([embedding]) == []


@pytest.mark.fast
def test_a_render_error_is_recorded_the_same_on_every_preview(tmp_path: Path) -> None:
    """An error naming an object is recorded without its address, so the plan's hash does not move."""
    source = checkpoint(tmp_path, {"chat_template": "{{ raise_exception(raise_exception) }}"})
    first, second = record_of(source), record_of(source)
    assert first["render_error"] == second["render_error"]
    assert first["render_error"].startswith("a user turn (TemplateError: ") and " at 0x" not in first["render_error"]


@pytest.mark.fast
def test_a_template_is_never_given_to_an_untrusted_jinja2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below jinja2 3.1.6 (sandbox escapes) nothing is rendered, and the plan says why."""
    import jinja2

    monkeypatch.setattr(jinja2, "__version__", "3.1.5")
    record = record_of(corpus_source(template("Qwen3-Coder"), tmp_path))
    assert (
        record["render_error"] == "any request (jinja2 3.1.5 is older than 3.1.6, whose sandbox is trusted: upgrade it)"
    )
    assert not record["renders_tools"]


@pytest.mark.fast
def test_a_template_that_is_not_jinja_is_recorded_with_its_line(tmp_path: Path) -> None:
    """A checkpoint's broken template is not refused (completions still work): the plan names the error."""
    record = record_of(checkpoint(tmp_path, {"chat_template": "{{ messages }}\n{% if %}"}))
    assert record["render_error"].startswith("any request (TemplateSyntaxError: line 2: ")
