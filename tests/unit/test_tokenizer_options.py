"""The worker's side of --chat-template and --tool-parser: the reviewed file read once, and mlx_lm's seam for both.

mlx_lm reads a ``chat_template`` and a ``tool_parser_type`` given in its tokenizer config (what its own
``--chat-template`` fills in): the seam tests below fail loudly when an mlx_lm release stops doing either.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.runtime.entries.file_checks import reviewed_template
from mlx_agent.runtime.entries.mlx_lm_entry import tokenizer_options, with_tokenizer_options
from mlx_agent.wire import EXIT_REFUSED, REFUSAL_PREFIX
from mlx_agent.worker_contract import FileCheck

QWEN_STYLE = "{{ messages[0].content }}<tool_call>\n<function=x>"  # mlx_lm infers qwen3_coder from this text


def bound(path: Path, data: bytes) -> FileCheck:
    """Return the contract's check binding ``path`` to ``data``."""
    return FileCheck(str(path), hashlib.sha256(data).hexdigest(), len(data))


@pytest.mark.fast
def test_the_reviewed_template_is_returned(tmp_path: Path) -> None:
    """An unchanged file gives its text."""
    path = tmp_path / "t.jinja"
    path.write_text("héllo {{ x }}", encoding="utf-8")
    assert reviewed_template(bound(path, path.read_bytes())) == "héllo {{ x }}"


@pytest.mark.fast
def test_no_file_means_no_template() -> None:
    """Without a bound file the checkpoint's template stays (None)."""
    assert reviewed_template(None) is None


@pytest.mark.fast
@pytest.mark.parametrize("change", ["edited", "removed", "linked"])
def test_a_template_changed_after_review_is_refused(
    tmp_path: Path, change: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Edited, removed or replaced by a link, the file is refused with adapter_changed and the refusal exit."""
    path = tmp_path / "t.jinja"
    path.write_text("{{ a }}", encoding="utf-8")
    argv = bound(path, path.read_bytes())
    if change == "edited":
        path.write_text("{{ b }}", encoding="utf-8")
    elif change == "removed":
        path.unlink()
    else:
        shutil.copy(path, tmp_path / "copy.jinja")
        path.unlink()
        path.symlink_to(tmp_path / "copy.jinja")
    with pytest.raises(SystemExit) as exited:
        reviewed_template(argv)
    assert exited.value.code == EXIT_REFUSED
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith(REFUSAL_PREFIX)]
    refusal = json.loads(line.removeprefix(REFUSAL_PREFIX))
    reason = {"edited": "content_changed", "removed": "missing", "linked": "missing"}[change]
    assert (refusal["code"], refusal["details"]["files"][0]["reason"]) == ("adapter_changed", reason)


@pytest.mark.fast
def test_the_options_are_added_over_mlx_lms_own_tokenizer_config() -> None:
    """The wrapped load gets mlx_lm's own config with the options on top; its signature is upstream's."""
    seen: dict[str, Any] = {}

    def load(path_or_hf_repo: str, tokenizer_config: dict[str, Any] | None = None, **kwargs: Any) -> str:
        seen.update(tokenizer_config or {})
        return path_or_hf_repo

    wrapped = with_tokenizer_options(load, tokenizer_options("T", "json_tools"))
    assert wrapped("m", tokenizer_config={"trust_remote_code": False}) == "m"
    assert seen == {"trust_remote_code": False, "chat_template": "T", "tool_parser_type": "json_tools"}
    assert tokenizer_options(None, None) == {}
    import inspect

    assert list(inspect.signature(wrapped).parameters)[:2] == ["path_or_hf_repo", "tokenizer_config"]


def test_seam_mlx_lm_renders_with_a_given_chat_template_and_infers_its_parser(tiny_model: Path) -> None:
    """mlx_lm's tokenizer load takes ``chat_template`` from the config over the checkpoint's, and reads it."""
    from mlx_lm.tokenizer_utils import load

    tokenizer = load(tiny_model, {"chat_template": QWEN_STYLE})
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)  # type: ignore[no-untyped-call]
    assert rendered.startswith("hi<tool_call>")
    assert tokenizer.tool_parser.__module__ == "mlx_lm.tool_parsers.qwen3_coder"


def test_seam_mlx_lm_takes_tool_parser_type_over_the_templates(tiny_model: Path) -> None:
    """``tool_parser_type`` in the config picks the parser, whatever the template implies."""
    from mlx_lm.tokenizer_utils import load

    tokenizer = load(tiny_model, {"chat_template": QWEN_STYLE, "tool_parser_type": "json_tools"})
    assert tokenizer.tool_parser.__module__ == "mlx_lm.tool_parsers.json_tools"


def test_seam_mlx_lm_server_passes_its_tokenizer_config_to_load_by_name() -> None:
    """ModelProvider loads the served model with ``tokenizer_config=`` (the keyword the worker's wrapper fills in).

    (A draft model's load gets the options too, through the same wrapper: they change nothing it is used for.)
    """
    import ast
    import inspect
    import textwrap

    import mlx_lm.server as server

    tree = ast.parse(textwrap.dedent(inspect.getsource(server.ModelProvider._load)))
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "load"
    ]
    assert calls, "ModelProvider._load no longer calls load"
    served = [call for call in calls if "adapter_path" in {k.arg for k in call.keywords}]
    assert served, "ModelProvider._load no longer loads the served model with adapter_path="
    assert all("tokenizer_config" in {k.arg for k in call.keywords} for call in served)
