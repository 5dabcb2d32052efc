"""The seams of mlx_lm that the wrapped entry depends on, and the tested mlx-lm range (pinned >=0.32.2,<0.33)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import mlx_lm
import mlx_lm.server
import pytest

from mlx_agent.errors import SeamChanged
from mlx_agent.runtime.entries import mlx_lm_server, seams
from mlx_agent.runtime.entries.contract_entry import started
from mlx_agent.runtime.serving.limits import Limits
from mlx_agent.wire import EXIT_REFUSED, REFUSAL_PREFIX
from mlx_agent.worker_contract import split_worker_argv
from tests.contract_support import contract

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_installed_mlx_lm_has_every_seam() -> None:
    """The installed mlx_lm offers every function, parameter, dataclass field and tokenizer property we use."""
    seams.check_seams()


def test_the_pin_is_the_tested_range_and_installed() -> None:
    """The project pins mlx-lm to the range the seams were checked against, and the installed one is inside it."""
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    assert f"mlx-lm{seams.SUPPORTED_MLX_LM}" in dependencies
    assert seams.version_supported(mlx_lm.__version__)
    assert not seams.version_supported("0.33.0")


@pytest.mark.parametrize("dotted", sorted(seams.SEAMS))
def test_a_renamed_seam_fails_loudly(monkeypatch: pytest.MonkeyPatch, dotted: str) -> None:
    """If upstream renames any seam, the check names it instead of serving unpatched."""
    owner: Any = mlx_lm.server
    *parents, name = dotted.split(".")
    for part in parents:
        owner = getattr(owner, part)
    monkeypatch.delattr(owner, name)
    with pytest.raises(SeamChanged, match=name):
        seams.check_seams()


def test_a_changed_signature_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If upstream reorders run's parameters, the entry refuses to start."""

    def run(port: int, host: str, model_provider: Any) -> None:
        raise AssertionError

    monkeypatch.setattr(mlx_lm.server, "run", run)
    with pytest.raises(SeamChanged, match="expected to start with"):
        seams.check_seams()


def test_a_lost_dataclass_field_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If upstream's CompletionRequest loses a field we copy, the check names it."""

    class CompletionRequest:
        pass

    monkeypatch.setattr(mlx_lm.server, "CompletionRequest", CompletionRequest)
    with pytest.raises(SeamChanged, match="CompletionRequest"):
        seams.check_seams()


def test_a_lost_tokenizer_property_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If the tokenizer wrapper loses a property the watcher reads, the check names it."""
    import mlx_lm.tokenizer_utils

    monkeypatch.delattr(mlx_lm.tokenizer_utils.TokenizerWrapper, "think_end_tokens")
    with pytest.raises(SeamChanged, match="think_end_tokens"):
        seams.check_seams()


@pytest.mark.parametrize(
    ("module", "name", "match"),
    [
        ("mlx_lm.tokenizer_utils", "_infer_tool_parser", "_infer_tool_parser"),
        ("mlx_lm.tool_parsers.mistral", "_parse_header_calls", "_parse_header_calls"),
        ("mlx_lm.tool_parsers.glm47", "_func_arg_regex", "_func_arg_regex"),
        ("mlx_lm.tool_parsers.minimax_m2", "_parameter_complete_regex", "_parameter_complete_regex"),
        ("mlx_lm.tool_parsers.kimi_k2", "parse_tool_call", "parse_tool_call"),
    ],
)
def test_a_lost_tool_parser_seam_fails_loudly(
    monkeypatch: pytest.MonkeyPatch, module: str, name: str, match: str
) -> None:
    """If mlx_lm loses what family_parsers wraps or reads (its parser choice, a reader, a pattern), it is named."""
    import importlib

    monkeypatch.delattr(importlib.import_module(module), name)
    with pytest.raises(SeamChanged, match=match):
        seams.check_seams()


def test_a_tokenizer_load_that_no_longer_asks_for_a_parser_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """If mlx_lm's tokenizer load stops asking _infer_tool_parser (ours would never be chosen), the check says so."""
    import mlx_lm.tokenizer_utils

    def load(model_path: Any, tokenizer_config_extra: Any = None) -> None:
        raise AssertionError

    monkeypatch.setattr(mlx_lm.tokenizer_utils, "load", load)
    with pytest.raises(SeamChanged, match="no longer uses"):
        seams.check_seams()


def test_a_text_machine_that_no_longer_reads_response_transitions_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama's second call start reaches mlx_lm's text machine through response_transitions: its loss is named."""

    def make_text_state_machine(tokenizer: Any, stop_words: Any = None) -> None:
        return tokenizer.tool_call_start  # type: ignore[no-any-return]

    monkeypatch.setattr(mlx_lm.server, "make_text_state_machine", make_text_state_machine)
    with pytest.raises(SeamChanged, match="response_transitions"):
        seams.check_seams()


def test_a_changed_seam_stops_the_entry(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """serve() exits with status 2 and says which seam changed, before parsing arguments or listening."""
    monkeypatch.delattr(mlx_lm.server, "_make_logits_processors")
    given, rest = split_worker_argv(["--model", "m", *contract()])
    assert mlx_lm_server.serve(rest, given) == 2
    assert "_make_logits_processors" in capsys.readouterr().err


def test_wrapped_run_loads_before_it_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replacement run loads the default model, then serves our generator with our handler class."""
    from mlx_agent.runtime.serving import generator, handler

    calls: list[str] = []

    class Provider:
        model = draft_model = None

        class cli_args:
            model = "m"
            prompt_cache_size = 3

        def load_default(self) -> None:
            calls.append("load")

    class Generator:
        def __init__(
            self,
            provider: Any,
            prompt_cache: Any,
            limits: Limits,
            lookup: Any = None,
            context_window: int | None = None,
        ) -> None:
            calls.append(f"generator {limits.reasoning_budget} {context_window}")

    def run_http_server(host: str, port: int, response_generator: Any, handler_class: Any) -> None:
        calls.append(f"listen {host}:{port} {handler_class.__name__}")

    monkeypatch.setattr(generator, "WrappedGenerator", Generator)
    monkeypatch.setattr(mlx_lm.server, "_run_http_server", run_http_server)
    mlx_lm_server.serving_run(Limits(reasoning_budget=7))("127.0.0.1", 1, Provider())
    assert calls == ["load", "generator 7 None", f"listen 127.0.0.1:1 {handler.WrappedHandler.__name__}"]


def test_the_front_flags_are_taken_out_before_mlx_lm_parses() -> None:
    """The front's socket and the contract's context window reach the worker's own settings, not mlx_lm's parser."""
    given, rest = split_worker_argv(
        ["--model", "m", "--mlx-agent-socket", "/s/0-1.sock", *contract(context_window=4096)]
    )
    assert rest == ["--model", "m"] and mlx_lm_server.listening(given) == mlx_lm_server.Listening("/s/0-1.sock", 4096)


def test_the_kept_prompt_cache_arrives_with_its_reviewed_disk_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """The worker takes the contract's prompt_cache_disk_gb as the plan gave it; a cache directory alone is refused."""
    flags = ["--mlx-agent-prompt-cache", "/c/id"]
    given, rest = split_worker_argv(["--model", "m", *flags, *contract(prompt_cache_disk_gb=1.5)])
    listening = mlx_lm_server.listening(given)
    assert (listening.prompt_cache_dir, listening.prompt_cache_disk_gb, rest) == ("/c/id", 1.5, ["--model", "m"])
    with pytest.raises(SystemExit) as exited:
        started([*flags, *contract()])
    assert exited.value.code == EXIT_REFUSED
    assert capsys.readouterr().err.startswith(REFUSAL_PREFIX + '{"code": "invalid_arguments"')
