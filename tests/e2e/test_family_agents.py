"""Claude Code and Codex CLI, unmodified, against tiny models that speak six real families' templates and calls.

Each family's model (tests/fixtures/family_model.py) carries the checkpoint's own chat template and special
tokens and writes the family's own tool-call text: Qwen3-Coder's ``<function=...>`` XML, GLM-4.7's
``<arg_key>``/``<arg_value>``, Llama 3.3's ``{"name", "parameters"}`` JSON, Mistral Small 3.2's
``[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}``, DeepSeek V3.1's ``tool▁calls▁begin`` tokens and gpt-oss's Harmony
``to=functions.NAME``. One server per family (``serve start``, in a network namespace with only loopback)
serves both agents: each runs five tool turns that include an edit whose strings end in newlines, then ends
on the answer. The edited file must hold exactly the bytes the call asked for, every turn from the second must
read at least 95% of the previous prompt from the cache (the front's request lines), the agent must exit 0
with no error on stderr. Before any server, the model is run in-process on prompts its template renders, so a
script the weights do not follow fails there, not as an agent's puzzling session.

Codex's edits go through apply_patch, whose envelope (``*** Begin Patch`` ... ``*** End Patch`` and a newline) is the
argument's first and last text: a parser that strips an argument's outer whitespace (GLM's) does not change
them; Claude Code's Edit strings are the ones that show it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agents_support import (
    Namespace,
    agent_binary,
    assert_cache_reuse,
    claude_env,
    clean_env,
    codex_exec,
    codex_home,
    error_lines,
    inside,
    log_tail,
    loopback_namespace,
    module_agent,
    prompt_turns,
    request_lines,
    serve,
    tool_results,
)
from tests.conftest import Agent
from tests.fixtures.families import FAMILIES, Family
from tests.fixtures.family_model import Script, build_family_model

pytestmark = pytest.mark.e2e

ANSWER = "Basil"
NOTES = "alpha one\n\nbeta two\ngamma three\n"
EDITED = "ALPHA ONE\nbeta two\ngamma three\n"  # the edit drops the blank line: its strings end in "\n\n" and "\n"
DONE = "done\n"
# Each prompt holds its agent's sink word (the model reads which agent it serves from it).
CLAUDE_PROMPT = "Quokka: tidy notes.txt, then tell me the word."
CODEX_PROMPT = "Wombat: look at notes.txt, patch it, then tell me the word."


def claude_script(notes: Path) -> Script:
    """Return Claude Code's session: Read, Edit (strings ending in newlines), then three Bash commands."""
    path = str(notes)
    return Script(
        "Quokka",
        (
            ("Read", {"file_path": path}),
            ("Edit", {"file_path": path, "old_string": "alpha one\n\n", "new_string": "ALPHA ONE\n"}),
            ("Bash", {"command": "grep -c ONE notes.txt", "description": "Count the edited lines"}),
            ("Bash", {"command": "cat notes.txt", "description": "Show the notes"}),
            ("Bash", {"command": "wc -l notes.txt", "description": "Count the lines"}),
        ),
        ANSWER,
    )


# apply_patch is a freeform tool: the front offers it as a function of one ``input`` string, the patch.
CODEX_PATCH = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-alpha one\n-\n+ALPHA ONE\n beta two\n*** End Patch\n"
CODEX_ADD = "*** Begin Patch\n*** Add File: done.txt\n+done\n*** End Patch\n"
CODEX_SCRIPT = Script(
    "Wombat",
    (
        ("exec_command", {"cmd": "cat notes.txt"}),
        ("exec_command", {"cmd": "grep -c alpha notes.txt"}),
        ("exec_command", {"cmd": "wc -l notes.txt"}),
        ("apply_patch", {"input": CODEX_PATCH}),
        ("apply_patch", {"input": CODEX_ADD}),
    ),
    ANSWER,
)
TURNS = len(CODEX_SCRIPT.calls) + 1


@dataclass
class FamilyServer:
    """One family's model served by the front inside a loopback-only namespace, and the agents' folders."""

    family: Family
    cli: Agent
    namespace: Namespace
    port: int
    root: Path

    def work(self, name: str) -> Path:
        """Return the agent's working folder holding a fresh notes.txt (and nothing else)."""
        work = self.root / name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        (work / "notes.txt").write_text(NOTES)
        return work

    def server_log(self) -> str:
        """Return the last lines of the worker's log and the front's (for a failure's message)."""
        return (
            f"worker:\n{log_tail(self.cli, self.port, 'worker')}\nfront:\n{log_tail(self.cli, self.port, 'front', 5)}"
        )


@dataclass
class Built:
    """One family's model, scripted for both agents, and the folder it lies in."""

    family: Family
    model: Path
    root: Path
    scripts: dict[str, Script]


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda f: f.name)
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Build the family's model, scripted for Claude Code (in its working folder) and for Codex."""
    fam: Family = request.param
    root = tmp_path_factory.mktemp(fam.name)
    for name in ("claude-work", "codex-work"):
        (root / name).mkdir()
    scripts = {"claude": claude_script(root / "claude-work" / "notes.txt"), "codex": CODEX_SCRIPT}
    return Built(fam, build_family_model(root / "model", fam, scripts), root, scripts)


@pytest.fixture(scope="module")
def served(built: Built) -> Iterator[FamilyServer]:
    """Serve the family's model once for both agents' tests."""
    with loopback_namespace() as namespace:
        cli = inside(module_agent(built.root), namespace)
        port = serve(cli, built.model, ["--log-prompts"], None, built.root)
        try:
            yield FamilyServer(built.family, cli, namespace, port, built.root)
        finally:
            assert cli.run("serve", "stop", "--port", str(port)).rc == 0


def conversation(script: Script, prompt: str, results: int) -> list[dict[str, Any]]:
    """Return the script's conversation after ``results`` tool results (OpenAI messages, ids Mistral accepts)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You help."}, {"role": "user", "content": prompt}]
    for k, (name, arguments) in enumerate(script.calls[:results]):
        call = {"id": f"call{k:05d}", "type": "function", "function": {"name": name, "arguments": arguments}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call{k:05d}", "content": f"output {k}\n"})
    return messages


def offered_tools(script: Script) -> list[dict[str, Any]]:
    """Return the tools the script calls, each with the string parameters its calls pass."""
    properties: dict[str, dict[str, Any]] = {}
    for name, arguments in script.calls:
        properties.setdefault(name, {}).update({key: {"type": "string"} for key in arguments})
    return [
        {
            "type": "function",
            "function": {"name": name, "description": name, "parameters": {"type": "object", "properties": found}},
        }
        for name, found in properties.items()
    ]


def test_family_model_follows_its_script(built: Built) -> None:
    """The model, run in-process on its own template's prompts, writes each turn's scripted call, then the answer."""
    from mlx_lm import generate, load

    model, tokenizer = load(str(built.model))[:2]
    for agent, prompt in (("claude", CLAUDE_PROMPT), ("codex", CODEX_PROMPT)):
        script = built.scripts[agent]
        replies = [built.family.call(k, *call) for k, call in enumerate(script.calls)]
        replies.append(built.family.answer(script.answer))
        for results, pieces in enumerate(replies):
            messages = conversation(script, prompt, results)
            ids = tokenizer.apply_chat_template(  # type: ignore[no-untyped-call]
                messages, tools=offered_tools(script), add_generation_prompt=True
            )
            written = generate(model, tokenizer, ids, max_tokens=len(pieces) + 2)
            # A generation prompt that opens the thinking (mlx_lm turns it on where the tokenizer has <think>).
            closing = "</think>" if tokenizer.convert_ids_to_tokens(ids[-1]) == "<think>" else ""
            assert written == closing + "".join(pieces[:-1]), f"{agent}, turn {results + 1}"


def session(served: FamilyServer, seen: int, prompt: str) -> list[dict[str, Any]]:
    """Return the session's turns (the request lines after ``seen`` whose prompt holds ``prompt``), all 200."""
    lines = request_lines(served.cli, served.port)[seen:]
    turns = prompt_turns(lines, prompt)
    shown = [(line["endpoint"], line["status"], line["prompt_tokens"], line["cached_tokens"]) for line in lines]
    assert all(line["status"] == 200 for line in lines), f"{shown}\n{served.server_log()}"
    assert [tool_results(t) for t in turns] == list(range(TURNS)), f"{shown}\n{served.server_log()}"
    return turns


def report(name: str, turns: list[dict[str, Any]]) -> None:
    """Check the cache reuse and print each turn's prompt and cached tokens, and the first prefill's time."""
    figures = assert_cache_reuse(turns)
    shown = ", ".join(f"turn {n}: {p}/{c}" for n, (p, c) in enumerate(figures, start=1))
    print(f"\n{name}: {shown}; turn 1 answered its first token in {turns[0]['ttft_ms']} ms")


def test_claude_code_session(served: FamilyServer) -> None:
    """`claude -p` reads, edits and runs commands for five turns on the family's calls, and ends on the answer."""
    work = served.work("claude-work")
    seen = len(request_lines(served.cli, served.port))
    argv = [
        str(agent_binary("claude")),
        "--bare",
        "--system-prompt",
        "You tidy notes for the user.",
        "-p",
        CLAUDE_PROMPT,
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        "claude-sonnet-4-5",
        "--tools",
        "Read,Edit,Bash",
        "--allowedTools",
        "Read,Edit,Bash",
    ]
    env = claude_env(served.root / "claude-home", served.port)
    done = served.namespace.run(argv, env, work, timeout=600)
    said = f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}\n{served.server_log()}"
    assert done.returncode == 0, said
    assert not error_lines(done.stderr), said
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    uses = [b for e in events if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use"]
    results = [b for e in events if e["type"] == "user" for b in e["message"]["content"] if b["type"] == "tool_result"]
    assert [b["name"] for b in uses] == [name for name, _ in claude_script(work / "notes.txt").calls], said
    assert not [b for b in results if b.get("is_error")], said
    assert (work / "notes.txt").read_bytes() == EDITED.encode(), said
    result = events[-1]
    assert result["type"] == "result" and result["is_error"] is False and result["result"] == ANSWER, said
    report(f"{served.family.name} claude -p", session(served, seen, CLAUDE_PROMPT))


def test_codex_exec_session(served: FamilyServer) -> None:
    """`codex exec` runs commands and applies patches for five turns on the family's calls, and ends on the answer."""
    work = served.work("codex-work")
    seen = len(request_lines(served.cli, served.port))
    home = served.root / "codex-home"
    if not home.exists():
        codex_home(home, served.port, model="gpt-5.5")  # a catalogued model: Codex offers apply_patch
    env = clean_env(served.root, CODEX_HOME=str(home), LOCAL_API_KEY="unused")
    done = served.namespace.run(codex_exec(CODEX_PROMPT), env, work, timeout=600)
    said = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}\n{served.server_log()}"
    assert done.returncode == 0, said
    assert not error_lines(done.stderr), said
    assert (work / "notes.txt").read_bytes() == EDITED.encode(), said
    assert (work / "done.txt").read_bytes() == DONE.encode(), said
    assert done.stdout.strip().splitlines()[-1] == ANSWER, said
    report(f"{served.family.name} codex exec", session(served, seen, CODEX_PROMPT))
