"""``--chat-template`` and ``--tool-parser`` through the wrapped worker: what it renders, which parser reads calls.

The model is scripted to answer every prompt ending in a generation prompt with
``<tool_call>{"name": "get_time", ...}</tool_call>`` (see wrapped_support), and its checkpoint's template
(the tiny model's ChatML) renders no tools and names no parser, so mlx_lm reads the call as text. The worker is
given the plan's contract as the front gives it (its ``chat_template`` and ``tool_parser``):

* a template file changes the prompt the worker renders (its token count is the file's rendering, counted with the
  model's own tokenizer) and, as it names json_tools' markers, the parser mlx_lm infers;
* ``--tool-parser`` picks the parser over what the template implies, both ways;
* a template file edited after review is refused before anything loads;
* through the CLI, a JIT server with both options serves the file's rendering and reads the call, and once the
  file is edited its next load is refused by the front, and the reviewed worker argv by the worker.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlx_agent.wire import EXIT_REFUSED, REFUSAL_PREFIX
from mlx_agent.worker_contract import FileCheck
from tests.adapter_support import restart_refusal
from tests.conftest import Agent, free_port
from tests.contract_support import contract
from tests.e2e.tool_call_models import TOOLS, WHOLE
from tests.e2e.wrapped_support import REPO_ROOT, Server, running, scripted_model
from tests.fixtures.tiny_model import CHAT_TEMPLATE

pytestmark = pytest.mark.e2e

CALL = WHOLE  # the tool call the scripted models write
MESSAGES = [{"role": "user", "content": "What time is it?"}]
# ChatML that lists the tools in a system turn and writes calls as Hermes does (json_tools' markers for mlx_lm).
TOOL_TEMPLATE = (
    "{%- if tools %}{{- '<|im_start|>system\\nTools:\\n' }}"
    "{%- for tool in tools %}{{- tool | tojson }}{{- '\\n' }}{%- endfor %}"
    '{{- \'Call one as <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>\\n\' }}{%- endif %}'
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- set tool_call = tool_call.function if tool_call.function is defined else tool_call %}"
    "{{- '<tool_call>' + {'name': tool_call.name, 'arguments': tool_call.arguments} | tojson + '</tool_call>' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the scripted tool caller, whose checkpoint template renders no tools and names no parser."""
    chain = {"\n": "<tool_call>", "<tool_call>": CALL, CALL: "</tool_call>", "</tool_call>": "<|im_end|>"}
    return scripted_model(
        tmp_path_factory.mktemp("agent_options") / "model",
        chain,
        "<|im_end|>",
        special=["<tool_call>", "</tool_call>"],
        plain=[CALL],
    )


@pytest.fixture(scope="module")
def template_file(model: Path) -> Path:
    """Write the tool-rendering template as a user's file beside the model."""
    path = model.parent / "tools.jinja"
    path.write_text(TOOL_TEMPLATE, encoding="utf-8")
    return path


def bound(path: Path) -> FileCheck:
    """Return the contract's check of a file as it is now."""
    data = path.read_bytes()
    return FileCheck(str(path), hashlib.sha256(data).hexdigest(), len(data))


def rendered_tokens(model: Path, template: str) -> int:
    """Return how many tokens the model's own tokenizer makes of the request rendered with ``template``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    text = tokenizer.apply_chat_template(
        MESSAGES, tools=TOOLS, chat_template=template, add_generation_prompt=True, tokenize=False
    )
    return len(tokenizer.encode(text, add_special_tokens=False))


def ask(server: Server) -> tuple[dict[str, Any], int]:
    """Ask with the tools; return the reply's message and its prompt's token count."""
    status, reply = server.post({"messages": MESSAGES, "tools": TOOLS, "max_tokens": 16})
    assert status == 200, reply
    return reply["choices"][0]["message"], reply["usage"]["prompt_tokens"]


@pytest.fixture(scope="module")
def checkpoint(model: Path) -> Iterator[Server]:
    """Serve the model with its own template and no option."""
    with running(model, model.parent) as started:
        yield started


def test_without_options_the_checkpoint_template_renders_and_no_parser_reads_the_call(
    checkpoint: Server, model: Path
) -> None:
    """The prompt is the checkpoint's rendering, and the call arrives as text: no parser knows it."""
    message, tokens = ask(checkpoint)
    assert tokens == rendered_tokens(model, CHAT_TEMPLATE)
    assert message["content"] == f"<tool_call>{CALL}</tool_call>"
    assert not message.get("tool_calls")


def test_a_chat_template_file_is_what_the_worker_renders_and_picks_the_parser(model: Path, template_file: Path) -> None:
    """With the file, the prompt is the file's rendering (tools listed), and mlx_lm infers json_tools from it."""
    with running(model, model.parent, *contract(chat_template=bound(template_file))) as server:
        message, tokens = ask(server)
    assert tokens == rendered_tokens(model, TOOL_TEMPLATE) > rendered_tokens(model, CHAT_TEMPLATE)
    [call] = message["tool_calls"]
    assert (call["function"]["name"], json.loads(call["function"]["arguments"])) == ("get_time", {"zone": "UTC"})


def test_a_tool_parser_reads_the_calls_of_a_template_that_names_none(model: Path) -> None:
    """--tool-parser json_tools alone: the checkpoint's prompt, and the call comes back as a call."""
    with running(model, model.parent, *contract(tool_parser="json_tools")) as server:
        message, tokens = ask(server)
    assert tokens == rendered_tokens(model, CHAT_TEMPLATE)
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_time"]


def test_a_tool_parser_overrides_the_one_the_template_implies(model: Path, template_file: Path) -> None:
    """The file implies json_tools; --tool-parser qwen3_coder is what reads the call, and it cannot: the marker."""
    with running(
        model, model.parent, *contract(chat_template=bound(template_file), tool_parser="qwen3_coder")
    ) as server:
        message, _ = ask(server)
    assert not message.get("tool_calls")
    [unparsed] = message["unparsed_tool_calls"]
    assert CALL in unparsed["text"]


def test_a_template_file_edited_after_review_is_refused_before_loading(model: Path, tmp_path: Path) -> None:
    """The worker reads the file once, finds other bytes than were reviewed, and exits with adapter_changed."""
    path = tmp_path / "edited.jinja"
    path.write_text(TOOL_TEMPLATE, encoding="utf-8")
    reviewed = bound(path)
    path.write_text(TOOL_TEMPLATE.replace("Tools:", "Tool list:"), encoding="utf-8")
    argv = [
        sys.executable,
        "-m",
        "mlx_agent.runtime",
        "mlx_lm",
        "--model",
        str(model),
        *contract(chat_template=reviewed),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120, check=False)
    assert done.returncode == EXIT_REFUSED, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith(REFUSAL_PREFIX)]
    refusal = json.loads(line.removeprefix(REFUSAL_PREFIX))
    assert refusal["code"] == "adapter_changed"
    assert [(f["path"], f["reason"]) for f in refusal["details"]["files"]] == [(str(path), "content_changed")]
    assert "mlx-agent: loading" not in done.stderr  # refused before the model was read


def test_through_the_cli_the_reviewed_template_serves_and_an_edited_one_fails_the_next_load(
    agent: Agent, model: Path, template_file: Path, tmp_path: Path
) -> None:
    """Serve start --jit with both options serves the file's rendering; edited, the next load is refused."""
    path = tmp_path / "tools.jinja"
    shutil.copy(template_file, path)
    port = free_port()
    args = [
        "--path",
        str(model),
        "--port",
        str(port),
        "--jit",
        "--chat-template",
        str(path),
        "--tool-parser",
        "json_tools",
    ]
    receipt = agent.launch(*args)
    front = Server([], port, tmp_path / "front.log")  # the front's port, asked as a client asks
    try:
        message, tokens = ask(front)
        assert tokens == rendered_tokens(model, TOOL_TEMPLATE)
        assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_time"]
        unloaded = agent.run("serve", "unload", "--port", str(port), "--expected-pid", str(receipt["pid"]))
        assert unloaded.rc == 0, unloaded.stdout
        path.write_text(TOOL_TEMPLATE.replace("Tools:", "Tool list:"), encoding="utf-8")
        status, refused = front.post({"messages": MESSAGES, "max_tokens": 4})
        assert status >= 400 and "adapter_changed" in json.dumps(refused), refused
    finally:
        assert agent.run("serve", "stop", "--port", str(port)).rc == 0
    assert restart_refusal(receipt, tmp_path / "restart.log") == (EXIT_REFUSED, "adapter_changed")
